// Training microbatches from a SampleSource for one data-parallel rank, in the order of
// Megatron's MegatronPretrainingSampler (--dataloader-type single): global sample indices run
// from `consumed_samples` upwards; each step of micro_batch_size * data_parallel_size
// consecutive indices is cut in DP-rank order, rank r taking [r * mbs, (r + 1) * mbs). A run
// resumed with the consumed-sample count saved at a step boundary sees exactly the batches
// the uninterrupted run would have seen. The last incomplete step is dropped.
//
// Each sample of L + 1 tokens becomes (Megatron's GPTDataset.__getitem__):
//   tokens       = text[0:L], labels = text[1:L+1]
//   loss_mask    = 1, 0 where the label is padding, and (eod_mask_loss) 0 where the input
//                  token is EOD
//   position_ids = 0..L-1, restarting after every EOD input token with reset_position_ids
// Padding (kPadTokenId, only in a partial validation sample) becomes token/label 0.
//
//   DataLoader loader(train, {.micro_batch_size = 4, .data_parallel_rank = r,
//                             .data_parallel_size = dp, .consumed_samples = resumed_at});
//   while (auto mb = loader.next()) step(mb->tokens, mb->labels, mb->loss_mask, mb->position_ids);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "data/sample_source.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

struct DataLoaderOptions {
  int64_t micro_batch_size = 1;
  int64_t data_parallel_rank = 0;
  int64_t data_parallel_size = 1;
  int64_t consumed_samples = 0;     // global samples already trained on (all ranks)
  int32_t eod = -1;                 // the tokenizer's EOD id (needed by the two options below)
  bool eod_mask_loss = false;       // --eod-mask-loss
  bool reset_position_ids = false;  // --reset-position-ids
};

struct MicroBatch {
  Tensor tokens;                        // host i32 [B, T]
  Tensor labels;                        // host i32 [B, T]
  Tensor loss_mask;                     // host f32 [B, T]
  Tensor position_ids;                  // host i32 [B, T]
  std::vector<int64_t> sample_indices;  // [B] the global sample index of each row
};

// One sample's four rows (each [L]) from its L + 1 tokens `text`.
void make_training_sample(const int32_t* text, int64_t L, const DataLoaderOptions& options, int32_t* tokens,
                          int32_t* labels, float* loss_mask, int32_t* position_ids);

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const SampleSource> dataset, DataLoaderOptions options);

  // The next microbatch for this rank, nullopt once fewer than a full step remain.
  std::optional<MicroBatch> next();
  // Global samples consumed so far by all ranks (options.consumed_samples + steps taken *
  // micro_batch_size * data_parallel_size): what a checkpoint records.
  int64_t consumed_samples() const { return consumed_; }
  const SampleSource& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const SampleSource> dataset_;
  DataLoaderOptions options_;
  int64_t consumed_;
  std::vector<int32_t> text_;
};

}  // namespace troupe
