#include "data/mock_dataset.hpp"

#include <random>

#include "base/check.hpp"

namespace troupe {

MockDataset::MockDataset(int64_t size, int64_t sequence_length, int64_t vocab_size, uint64_t seed)
    : size_(size), sequence_length_(sequence_length), vocab_size_(vocab_size), seed_(seed) {
  TROUPE_CHECK(size >= 0 && sequence_length > 0 && vocab_size > 0, "mock data needs positive sizes");
}

void MockDataset::sample(int64_t index, int32_t* out) const {
  TROUPE_CHECK(index >= 0 && index < size_, "mock sample ", index, " is outside [0, ", size_, ")");
  std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ull + uint64_t(index));
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab_size_ - 1));
  for (int64_t i = 0; i <= sequence_length_; ++i) out[i] = d(rng);
}

}  // namespace troupe
