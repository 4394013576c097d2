// numpy.random.RandomState's shuffle, bit for bit, so that Megatron's dataset indices (built
// with RandomState(seed).shuffle) come out identical here.
//
// What numpy does (numpy/random/_mt19937.pyx, mtrand.pyx, src/distributions/distributions.c):
//  - RandomState(seed) with an integer seed in [0, 2^32) seeds MT19937 with Knuth's
//    initialisation (mt19937_seed), which is exactly std::mt19937(seed).
//  - shuffle(x) on a 1-D array walks i = n-1 down to 1 and swaps x[i] with x[j],
//    j = random_interval(i): the smallest all-ones mask >= i, then draws (32-bit outputs when
//    i < 2^32, else 64-bit ones made of two outputs, high word first) masked by it until one
//    is <= i. The stream continues across calls, as one RandomState does in Megatron.
//
//   NumpyRandomState rng(1234567890);
//   std::vector<int64_t> v{1, 2, 3, 4, 5, 6, 7, 8, 9, 0};
//   rng.shuffle(v);   // {0, 1, 9, 6, 2, 4, 5, 8, 7, 3}, as numpy's own test_randomstate.py
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace troupe {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  uint32_t next_uint32() { return uint32_t(mt_()); }
  uint64_t next_uint64() {
    const uint64_t hi = next_uint32();
    return hi << 32 | next_uint32();
  }

  // numpy's random_interval: uniform in [0, max].
  uint64_t interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t value;
    if (max <= 0xffffffffULL) {
      while ((value = (next_uint32() & mask)) > max) {}
    } else {
      while ((value = (next_uint64() & mask)) > max) {}
    }
    return value;
  }

  template <typename T>
  void shuffle(std::span<T> x) {
    for (int64_t i = int64_t(x.size()) - 1; i >= 1; --i) {
      const auto j = int64_t(interval(uint64_t(i)));
      std::swap(x[size_t(i)], x[size_t(j)]);
    }
  }
  template <typename T>
  void shuffle(std::vector<T>& x) {
    shuffle(std::span<T>(x));
  }

 private:
  std::mt19937 mt_;
};

}  // namespace troupe
