#include "data/gpt_data.hpp"

#include <algorithm>

#include "data/blended_dataset.hpp"
#include "data/data_splits.hpp"
#include "data/gpt_dataset.hpp"
#include "base/check.hpp"

namespace troupe {
namespace {

using Splits = std::array<std::shared_ptr<const SampleSource>, 3>;

// _build_megatron_dataset_splits: one indexed dataset cut into its splits.
std::array<std::shared_ptr<const GptDataset>, 3> build_dataset_splits(const std::string& prefix,
                                                                      const SplitMatrix& matrix,
                                                                      const SplitSizes& sizes,
                                                                      const GptDataOptions& options) {
  auto indexed = std::make_shared<const IndexedDataset>(IndexedDataset::open(prefix));
  GptDatasetConfig config;
  config.sequence_length = options.sequence_length;
  config.random_seed = options.seed;
  config.split = options.split;
  config.cache_dir = options.cache_path;
  config.use_cache = options.use_cache;
  config.drop_last_partial_validation_sequence = options.drop_last_partial_validation_sequence;
  std::array<std::shared_ptr<const GptDataset>, 3> out;
  for (Split s : kSplits) {
    const auto range = split_range(matrix, s, indexed->num_sequences());
    if (!range) continue;
    out[size_t(s)] =
        std::make_shared<const GptDataset>(indexed, s, range->first, range->second, sizes[size_t(s)], config);
  }
  return out;
}

}  // namespace

Splits build_gpt_datasets(const GptDataOptions& options, const SplitSizes& sizes) {
  const Blend blend = parse_blend(options.data_path);
  const SplitMatrix matrix = split_matrix(parse_split(options.split));
  Splits result;

  if (blend.prefixes.size() == 1 && !blend.weights) {
    const auto single = build_dataset_splits(blend.prefixes[0], matrix, sizes, options);
    for (size_t k = 0; k < 3; ++k) result[k] = single[k];
    return result;
  }

  std::optional<std::vector<double>> weights;
  std::vector<std::array<int64_t, 3>> targets, buffers;
  if (blend.weights) {
    for (size_t k = 0; k < 3; ++k)
      TROUPE_CHECK(!matrix[k] || sizes[k], "a weighted --data-path needs a sample count for the ", split_name(Split(k)),
                   " split");
    weights = normalize_weights(*blend.weights);
    targets = samples_per_dataset(*weights, sizes);
    buffers = samples_per_dataset(*weights, sizes, options.mid_level_dataset_surplus);
  }

  // per_split[k][d]: dataset d's split k
  std::array<std::vector<std::shared_ptr<const GptDataset>>, 3> per_split;
  for (size_t d = 0; d < blend.prefixes.size(); ++d) {
    SplitSizes dataset_sizes;
    if (weights)
      for (size_t k = 0; k < 3; ++k) dataset_sizes[k] = buffers[d][k];
    const auto splits = build_dataset_splits(blend.prefixes[d], matrix, dataset_sizes, options);
    for (size_t k = 0; k < 3; ++k) per_split[k].push_back(splits[k]);
  }

  for (size_t k = 0; k < 3; ++k) {
    if (!matrix[k]) continue;
    std::vector<std::shared_ptr<const SampleSource>> parts(per_split[k].begin(), per_split[k].end());
    std::vector<double> w;
    std::optional<int64_t> size;
    if (weights) {
      w = *weights;
      int64_t total = 0;
      for (const auto& row : targets) total += row[k];
      size = total;
    } else {
      int64_t total = 0;
      for (const auto& p : parts) {
        w.push_back(double(p->size()));
        total += p->size();
      }
      if (sizes[k]) size = std::min(*sizes[k], total);
      for (size_t d = 0; d < parts.size(); ++d)
        TROUPE_CHECK(parts[d]->size() > 0, "--data-path '", blend.prefixes[d], "' has no ", split_name(Split(k)),
                     " samples; an unweighted blend needs some from every dataset");
    }
    result[k] = std::make_shared<const BlendedDataset>(std::move(parts), std::move(w), size);
  }
  return result;
}

}  // namespace troupe
