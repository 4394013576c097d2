// Single-device training iterations: forward and backward over the microbatches of a
// global batch (gradient accumulation), then one optimizer step. The pipeline runtime
// (actors/) replaces this loop; the model chunk and optimizer are the same.
//
//   Trainer trainer(chunk, optimizer, schedule);
//   IterationStats s = trainer.train_step(microbatches);   // s.loss, s.grad_norm, s.lr
#pragma once

#include <vector>

#include "data/token_windows.hpp"
#include "model/gpt_chunk.hpp"
#include "model/train/loss_scaler.hpp"
#include "model/train/lr_schedule.hpp"
#include "model/train/moe_iteration_stats.hpp"
#include "model/train/optimizer.hpp"

namespace troupe {

struct IterationStats {
  int64_t iteration = 0;
  double loss = 0.0;       // mean per-token loss over the global batch
  double grad_norm = 0.0;  // before clipping
  double lr = 0.0;         // applied by this iteration's step: the schedule after the updates before it
  // The schedule's lr after this iteration (advanced unless the step was skipped): what
  // Megatron's log line and TensorBoard show as the learning rate of this iteration.
  double next_lr = 0.0;
  float loss_scale = 1.0f;
  bool skipped = false;  // inf/nan gradients (fp16): no update
  int64_t tokens = 0;    // counted (non-ignored) target tokens
  // Per device (global rank order; the pipeline runtime only): milliseconds its forward and
  // backward ops ran this iteration, for the straggler report (apps/train/straggler_report.hpp).
  std::vector<double> busy_ms{};
  MoeIterationStats moe{};  // an MoE model's router losses and expert load (model/train/moe_iteration_stats.hpp)
};

class Trainer {
 public:
  // scaler may be null (bf16/f32: no loss scaling).
  Trainer(GptChunk& chunk, Optimizer& optimizer, const LrSchedule& schedule, LossScaler* scaler = nullptr,
          uint64_t seed = 1234);

  IterationStats train_step(const std::vector<Batch>& microbatches);
  // Mean per-token loss without gradients or dropout.
  double evaluate(const std::vector<Batch>& microbatches);
  // Successful optimizer steps so far: where the LR schedule is (LrSchedule::at).
  int64_t updates() const { return updates_; }

 private:
  GptChunk& chunk_;
  Optimizer& optimizer_;
  LrSchedule schedule_;
  LossScaler* scaler_;
  uint64_t seed_;
  int64_t iteration_ = 0;
  int64_t updates_ = 0;  // steps not skipped
};

// Counted targets (>= 0) in a host i32 tensor.
int64_t count_targets(const Tensor& targets);
// Sum of a host f32 [N] loss tensor in f64.
double sum_losses(const Tensor& losses_host);

}  // namespace troupe
