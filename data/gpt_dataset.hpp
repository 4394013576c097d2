// Megatron's GPTDataset (megatron/core/datasets/gpt_dataset.py + helpers.cpp): fixed-length
// training samples cut from the token stream of a range of an indexed dataset's sequences.
//
// Three indices, built exactly as Megatron builds them, so a Megatron run and a Troupe run with
// the same data, split, seed, sequence length and sample count see the same samples in the
// same order:
//   document index  the split's sequence ids repeated for E epochs and shuffled with
//                   numpy RandomState(seed); when the last epoch is used for less than 80% of
//                   its samples, the first E-1 epochs and the last are shuffled separately
//   sample index    [num_samples + 1, 2]: (position in the document index, token offset) where
//                   each sample starts; a sample spans L + 1 tokens across documents and the next
//                   one starts on its last token (they overlap by one)
//   shuffle index   a permutation of the samples from the same RandomState (the samples of a
//                   separate last epoch are permuted among themselves)
// E is the smallest number of epochs holding num_samples * L + 1 tokens.
//
// The indices are cached as .npy files in `cache_dir` (default, as Megatron:
// `{prefix}/cache/GPTDataset_indices/`) named `{hash}-GPTDataset-{split}-{document_index,
// sample_index,shuffle_index}.npy` plus `-description.txt`, where hash is a hash of the
// description (dataset, sequence range, split, seed, sequence length, sample count, dataset
// size). A restart whose description matches reuses them; any change builds new ones. Files are
// written under temporary names and renamed, the description last, so a crash never leaves
// a cache that looks complete.
//
//   auto data = std::make_shared<const IndexedDataset>(IndexedDataset::open("corpus_text_document"));
//   GptDatasetConfig cfg;  cfg.sequence_length = 1024;  cfg.random_seed = 1234;
//   GptDataset train(data, Split::train, 0, data->num_sequences(), /*num_samples=*/8000, cfg);
//   std::vector<int32_t> s(1025);  train.sample(0, s.data());
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/data_splits.hpp"
#include "data/indexed_dataset.hpp"
#include "data/npy.hpp"
#include "data/numpy_random.hpp"
#include "data/sample_source.hpp"

namespace troupe {

struct GptDatasetConfig {
  int64_t sequence_length = 0;  // L (--seq-length): a sample holds L + 1 tokens
  uint32_t random_seed = 1234;  // --seed
  // Recorded in the description only (Megatron keys its cache on them too).
  std::string split = "969,30,1";
  // Where the index files go; empty: `{prefix}/cache/GPTDataset_indices` (--data-cache-path).
  std::string cache_dir;
  bool use_cache = true;  // false: build in memory every time, write nothing
  // The validation split may keep a last, padded, partial sample (Megatron's
  // --no-drop-last-partial-validation-sequence sets this false); other splits always drop it.
  bool drop_last_partial_validation_sequence = true;
};

// --- The index algorithms, exposed for tests ------------------------------------------------

// Samples hold L + add_extra tokens; Megatron's add_extra_token_to_sequence is 1 for GPT.
inline constexpr int64_t kAddExtraToken = 1;

// _get_num_epochs: 1 when num_samples is unset, else the smallest E >= 1 with
// E * tokens_per_epoch >= num_samples * L + 1.
int64_t gpt_num_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t sequence_length);

struct GptEpochPlan {
  int64_t num_epochs = 1;
  bool separate_final_epoch = false;
  int64_t num_samples_sans_final_epoch = 0;  // meaningful when separate_final_epoch
};
GptEpochPlan gpt_epoch_plan(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t sequence_length);

// _build_document_index: `documents` (sequence ids) repeated num_epochs times, shuffled.
std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs, NumpyRandomState& rng,
                                          bool separate_final_epoch);

// helpers.cpp build_sample_idx: rows (document-index position, offset), flattened,
// (num_samples + 1) * 2 entries. `sizes` is indexed by sequence id.
std::vector<int64_t> build_sample_index(std::span<const int32_t> sizes, std::span<const int32_t> document_index,
                                        int64_t sequence_length, int64_t num_epochs, int64_t tokens_per_epoch,
                                        bool drop_last_partial_sequence, int64_t add_extra_token = kAddExtraToken);

// _build_shuffle_index: [0, num_samples) shuffled, then [num_samples, total_size) shuffled.
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng);

// 64-bit FNV-1a of `text` as 16 hex digits (names cache files).
std::string description_hash(const std::string& text);

// --- The dataset ------------------------------------------------------------------------------

class GptDataset final : public SampleSource {
 public:
  // Sequences [begin, end) of `dataset` (Megatron's indexed_indices for this split);
  // num_samples unset: one epoch's worth.
  GptDataset(std::shared_ptr<const IndexedDataset> dataset, Split split, int64_t begin, int64_t end,
             std::optional<int64_t> num_samples, GptDatasetConfig config);

  int64_t size() const override { return shuffle_index_.size(); }
  int64_t sequence_length() const override { return config_.sequence_length; }
  void sample(int64_t index, int32_t* out) const override;

  Split split() const { return split_; }
  const IndexedDataset& indexed_dataset() const { return *dataset_; }
  std::optional<int64_t> num_samples_requested() const { return num_samples_; }
  const std::string& description() const { return description_; }
  // True when the indices came from the cache instead of being built.
  bool loaded_from_cache() const { return loaded_from_cache_; }
  // The cache files' common path prefix (`{cache_dir}/{hash}-GPTDataset-{split}`), empty
  // without a cache.
  const std::string& cache_path_prefix() const { return cache_prefix_; }

  const IndexArray& document_index() const { return document_index_; }
  const IndexArray& sample_index() const { return sample_index_; }  // flattened [n + 1, 2]
  const IndexArray& shuffle_index() const { return shuffle_index_; }

 private:
  void build_indices(const std::vector<int32_t>& sizes, int64_t tokens_per_epoch);
  bool load_cache(int64_t expected_document_index_size);

  std::shared_ptr<const IndexedDataset> dataset_;
  Split split_;
  int64_t begin_, end_;
  std::optional<int64_t> num_samples_;
  GptDatasetConfig config_;
  std::string description_;
  std::string cache_prefix_;
  bool loaded_from_cache_ = false;
  // For errors about a bad index: where it came from, when that was the cache.
  std::string index_origin() const;
  IndexArray document_index_, sample_index_, shuffle_index_;
};

}  // namespace troupe
