#include "data/blended_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "data/data_splits.hpp"
#include "base/check.hpp"

namespace troupe {

void build_blending_indices(std::span<const double> weights, int64_t size, std::span<int16_t> dataset_index,
                            std::span<int64_t> dataset_sample_index) {
  TROUPE_CHECK(!weights.empty(), "build_blending_indices: no datasets");
  TROUPE_CHECK(int64_t(dataset_index.size()) >= size && int64_t(dataset_sample_index.size()) >= size,
               "build_blending_indices: output too small");
  std::vector<int64_t> taken(weights.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double n = std::max(double(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * n - double(taken[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * n - double(taken[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index[size_t(i)] = int16_t(best);
    dataset_sample_index[size_t(i)] = taken[best];
    ++taken[best];
  }
}

void build_exhaustive_blending_indices(std::span<const int64_t> sizes, std::span<int16_t> dataset_index,
                                       std::span<int64_t> dataset_sample_index) {
  int64_t total = 0;
  std::set<size_t> unspent;
  for (size_t d = 0; d < sizes.size(); ++d) {
    total += sizes[d];
    if (sizes[d] > 0) unspent.insert(d);
  }
  TROUPE_CHECK(int64_t(dataset_index.size()) >= total && int64_t(dataset_sample_index.size()) >= total,
               "build_exhaustive_blending_indices: output too small");
  std::vector<double> weights;
  for (int64_t s : sizes) weights.push_back(double(s) / double(total));
  std::vector<int64_t> taken(sizes.size(), 0);
  for (int64_t i = 0; !unspent.empty(); ++i) {
    const double n = std::max(double(i), 1.0);
    size_t best = 0;
    double best_error = std::numeric_limits<double>::lowest();
    for (size_t d : unspent) {
      const double error = weights[d] * n - double(taken[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index[size_t(i)] = int16_t(best);
    dataset_sample_index[size_t(i)] = taken[best];
    if (++taken[best] == sizes[best]) unspent.erase(best);
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights,
                               std::optional<int64_t> size)
    : datasets_(std::move(datasets)) {
  TROUPE_CHECK(!datasets_.empty(), "blended dataset: no datasets");
  TROUPE_CHECK(datasets_.size() == weights.size(), "blended dataset: ", datasets_.size(), " datasets but ",
               weights.size(), " weights");
  TROUPE_CHECK(datasets_.size() < 32767, "blended dataset: too many datasets (", datasets_.size(), ")");
  for (const auto& d : datasets_) {
    TROUPE_CHECK(d != nullptr, "blended dataset: null dataset");
    TROUPE_CHECK(d->sequence_length() == datasets_.front()->sequence_length(),
                 "blended dataset: datasets with different sequence lengths");
  }
  for (double w : weights) TROUPE_CHECK(w > 0, "blended dataset: weight ", w, " must be positive");

  if (size) {
    weights_ = normalize_weights(weights);
    dataset_index_.resize(size_t(*size));
    dataset_sample_index_.resize(size_t(*size));
    build_blending_indices(weights_, *size, dataset_index_, dataset_sample_index_);
  } else {
    std::vector<int64_t> counts;
    for (double w : weights) {
      TROUPE_CHECK(w == std::floor(w), "blended dataset: without a size, weights are sample counts; got ", w);
      counts.push_back(int64_t(w));
    }
    weights_ = std::move(weights);
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    dataset_index_.resize(size_t(total));
    dataset_sample_index_.resize(size_t(total));
    build_exhaustive_blending_indices(counts, dataset_index_, dataset_sample_index_);
  }

  std::vector<int64_t> used(datasets_.size(), 0);
  for (int16_t d : dataset_index_) ++used[size_t(d)];
  for (size_t d = 0; d < datasets_.size(); ++d)
    TROUPE_CHECK(used[d] <= datasets_[d]->size(), "the blend oversamples dataset ", d, ": it asks for ", used[d],
                 " samples, more than its ", datasets_[d]->size(),
                 " (raise the per-dataset surplus, Megatron's mid_level_dataset_surplus)");
}

void BlendedDataset::sample(int64_t index, int32_t* out) const {
  TROUPE_CHECK(index >= 0 && index < size(), "blended dataset: sample ", index, " out of range [0, ", size(), ")");
  datasets_[size_t(dataset_index_[size_t(index)])]->sample(dataset_sample_index_[size_t(index)], out);
}

}  // namespace troupe
