// Megatron's --mock-data: a sample source of random tokens, the same for the same seed and
// sample index, so runs with mock data are reproducible and need no files.
#pragma once

#include <cstdint>

#include "data/sample_source.hpp"

namespace troupe {

class MockDataset final : public SampleSource {
 public:
  MockDataset(int64_t size, int64_t sequence_length, int64_t vocab_size, uint64_t seed);
  int64_t size() const override { return size_; }
  int64_t sequence_length() const override { return sequence_length_; }
  void sample(int64_t index, int32_t* out) const override;

 private:
  int64_t size_, sequence_length_, vocab_size_;
  uint64_t seed_;
};

}  // namespace troupe
