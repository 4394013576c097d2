// Philox-4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11): a
// counter-based generator. Four 32-bit words are a pure function of a 128-bit counter and a
// 64-bit key, so any element of a random stream can be drawn independently, in any order,
// on the host or the device, with identical results. Dropout uses it as a stream of words:
//   word(seed, i) = philox4x32_10(counter = i / 4, key = seed).w[i % 4]
//
//   PhiloxWords r = philox4x32_10(/*counter=*/i / 4, /*key=*/seed);
//   float u = philox_uniform(r.w[i % 4]);   // in [0, 1)
//
// Plain g++ compiles this header too (the functions are then ordinary inline functions).
#pragma once

#include <cstdint>

#include "kernels/host_device.hpp"

namespace troupe {

struct PhiloxWords {
  uint32_t w[4];
};

namespace philox_detail {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments

// One round: two 32x32 -> 64-bit products, mixed with the key (a 64-bit multiply is one
// mul.wide.u32 on the device).
TROUPE_HOST_DEVICE PhiloxWords mix_round(const PhiloxWords& c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = uint64_t(kMul0) * c.w[0];
  const uint64_t p1 = uint64_t(kMul1) * c.w[2];
  return PhiloxWords{{uint32_t(p1 >> 32) ^ c.w[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.w[3] ^ k1, uint32_t(p0)}};
}
}  // namespace philox_detail

// The generator on a full 128-bit counter and 64-bit key (k0 = low word).
TROUPE_HOST_DEVICE PhiloxWords philox4x32_10(PhiloxWords counter, uint32_t k0, uint32_t k1) {
#if defined(__CUDA_ARCH__)  // device pass only: g++ warns on the pragma
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    counter = philox_detail::mix_round(counter, k0, k1);
    k0 += philox_detail::kWeyl0;
    k1 += philox_detail::kWeyl1;
  }
  return counter;
}

// Counter = (low, high, 0, 0) words of `counter`; key = (low, high) words of `key`.
TROUPE_HOST_DEVICE PhiloxWords philox4x32_10(uint64_t counter, uint64_t key) {
  return philox4x32_10(PhiloxWords{{uint32_t(counter), uint32_t(counter >> 32), 0u, 0u}}, uint32_t(key),
                       uint32_t(key >> 32));
}

// Uniform in [0, 1): the top 24 bits of the word times 2^-24 (exact in f32).
TROUPE_HOST_DEVICE float philox_uniform(uint32_t word) { return float(word >> 8) * (1.0f / 16777216.0f); }

}  // namespace troupe
