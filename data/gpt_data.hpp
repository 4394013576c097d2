// The train/valid/test sample sources for `--data-path ... --split ...`, built the way
// Megatron's BlendedMegatronDatasetBuilder builds them (blended_megatron_dataset_builder.py):
//
//  - one prefix, no weight: a GptDataset per split, asked for exactly that split's samples;
//  - weighted prefixes: each dataset's split is asked for ceil(ceil(N * w) * (1 + surplus))
//    samples (surplus 0.005), and a BlendedDataset of size sum(ceil(N * w)) mixes them;
//  - several prefixes, no weights: each dataset gives one epoch, and the blend weighs them by
//    their sample counts, min(N, total) samples in all.
// A split whose --split share is zero is absent (nullptr).
//
//   GptDataOptions opt;
//   opt.data_path = {"0.3", "out/moby_text_document", "0.7", "out/sotu_text_document"};
//   opt.split = "969,30,1";  opt.sequence_length = 1024;
//   auto splits = build_gpt_datasets(opt, {8000, 800, 80});   // train, valid, test samples
//   DataLoader loader(splits[0], {...});
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/sample_source.hpp"

namespace troupe {

struct GptDataOptions {
  std::vector<std::string> data_path;  // --data-path: [weight] prefix pairs, or prefixes
  std::string split = "969,30,1";      // --split
  int64_t sequence_length = 0;         // --seq-length
  uint32_t seed = 1234;                // --seed
  std::string cache_path;              // --data-cache-path (empty: next to each dataset)
  bool use_cache = true;
  double mid_level_dataset_surplus = 0.005;
  bool drop_last_partial_validation_sequence = true;
};

// Samples wanted per split (train, valid, test); unset: as many as one epoch gives.
using SplitSizes = std::array<std::optional<int64_t>, 3>;

std::array<std::shared_ptr<const SampleSource>, 3> build_gpt_datasets(const GptDataOptions& options,
                                                                      const SplitSizes& sizes);

}  // namespace troupe
