// Megatron's BlendedDataset (blended_dataset.py + helpers.cpp build_blending_indices): a fixed
// mix of several sample sources. Sample i comes from dataset_index[i], as its
// dataset_sample_index[i]-th sample. The assignment is greedy and has no randomness: for each
// i, with n = max(i, 1), the dataset d with the largest weight[d] * n - taken[d] (the lowest
// index on ties) gets it; the order within each dataset comes from that dataset's own shuffle.
//
//   BlendedDataset mix({a, b}, {0.3, 0.7}, 1000);   // weights are normalized
//   mix.dataset_index(0) == 1   // at n = 1: 0.3 - 0 < 0.7 - 0
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "data/sample_source.hpp"

namespace troupe {

// build_blending_indices: `size` draws by the greedy rule above.
void build_blending_indices(std::span<const double> weights, int64_t size, std::span<int16_t> dataset_index,
                            std::span<int64_t> dataset_sample_index);
// build_exhaustive_blending_indices: exactly sizes[d] draws from each d, weights sizes/total,
// the same greedy rule over the datasets not yet used up.
void build_exhaustive_blending_indices(std::span<const int64_t> sizes, std::span<int16_t> dataset_index,
                                       std::span<int64_t> dataset_sample_index);

class BlendedDataset final : public SampleSource {
 public:
  // With `size`: weights (positive) are normalized and `size` samples are drawn. Without: the
  // weights must be whole numbers and dataset d gives exactly weights[d] samples. Throws when a
  // dataset is asked for more samples than it has (Megatron's "oversamples" error).
  BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights,
                 std::optional<int64_t> size);

  int64_t size() const override { return int64_t(dataset_index_.size()); }
  int64_t sequence_length() const override { return datasets_.front()->sequence_length(); }
  void sample(int64_t index, int32_t* out) const override;

  int dataset_index(int64_t i) const { return dataset_index_[size_t(i)]; }
  int64_t dataset_sample_index(int64_t i) const { return dataset_sample_index_[size_t(i)]; }
  const std::vector<double>& weights() const { return weights_; }
  const std::vector<std::shared_ptr<const SampleSource>>& datasets() const { return datasets_; }

 private:
  std::vector<std::shared_ptr<const SampleSource>> datasets_;
  std::vector<double> weights_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace troupe
