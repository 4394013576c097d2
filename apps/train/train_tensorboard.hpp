// `troupe train --tensorboard-dir DIR`: Megatron-LM's TensorBoard scalars, with its tag names,
// written by apps/train/tensorboard_writer.hpp. Every iteration (Megatron's default
// --tensorboard-log-interval 1): "learning-rate", "batch-size", "lm loss" (not for skipped
// iterations), "loss-scale", "grad-norm", each also "<tag> vs samples" (x = consumed samples).
// Every log line: "iteration-time" (s, the window's mean), "throughput" (TFLOP/s per device),
// "mem-reserved-bytes" (the first GPU's memory in use; GPUs only). An MoE model adds every
// iteration Megatron's "load_balancing_loss" and "z_loss" (when the run has them) and, per MoE
// layer L, "moe/expert_load_max_layer_L" and "moe/expert_load_mean_layer_L". Every validation:
// "lm loss validation", "lm loss validation ppl", and their "vs samples".
//
//   TrainTensorBoard tb(o.tensorboard_dir);        // nothing happens when the dir is empty
//   tb.iteration(stats, consumed_samples, global_batch_size);
//   tb.log_line(window, run);
//   tb.validation(iteration, loss, consumed_samples);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/train/training_run.hpp"
#include "apps/train/tensorboard_writer.hpp"
#include "apps/train/train_log.hpp"
#include "model/train/trainer.hpp"

namespace troupe::apps {

class TrainTensorBoard {
 public:
  // moe_load_balancing / moe_z_loss: whether the run has those MoE losses (tagged when it has).
  explicit TrainTensorBoard(const std::string& dir, bool moe_load_balancing = false, bool moe_z_loss = false);
  bool enabled() const { return writer_ != nullptr; }
  void iteration(const IterationStats& s, int64_t consumed_samples, int64_t global_batch_size);
  void log_line(const LogWindow& w, const actors::TrainingRun& run);
  void validation(int64_t iteration, double loss, int64_t consumed_samples);

 private:
  // The scalar at `step`, and as "<tag> vs samples" at `samples`.
  void both(const std::string& tag, double value, int64_t step, int64_t samples);
  void moe(const IterationStats& s);
  std::unique_ptr<TensorBoardWriter> writer_;
  bool moe_load_balancing_ = false, moe_z_loss_ = false;
};

}  // namespace troupe::apps
