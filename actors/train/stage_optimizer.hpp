// The optimizer state of one device: per model chunk an Optimizer (f32 master weights and Adam
// moments; with the distributed optimizer only this data rank's shard of them), and what turns
// the stage's finished gradients into an update: the last gradient reductions, the gradient
// statistics for the global norm, AdamW, and (distributed optimizer) the all-gather of the
// updated parameter shards. No CAF here: the optimizer shard actor (optimizer_shard_actor.hpp)
// owns one and calls it from its own thread, while the stage actor is idle.
//
// The parameters and gradients stay with the stage's chunks (the StageWorker): this class
// reads the gradients and writes the parameters, on the stage's device stream.
//
//   StageOptimizer opt(worker, std::move(optimizers), norm_exclude);
//   opt.finalize_grads();                  // after the stage's last op (and the reducer's fence)
//   GradStats g = opt.grad_stats();        // this device's part of the global norm
//   opt.apply(lr, clip, loss_scale);       // clip decided from every device's part
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/train/checkpoint_shards.hpp"
#include "actors/train/stage_worker.hpp"
#include "kernels/grad_norm.hpp"
#include "model/train/optimizer.hpp"

namespace troupe::actors {

// What a checkpoint stores of one chunk's optimizer, as (name prefix, tensor): the master
// weights, and the Adam moments `with_moments`.
std::vector<std::pair<std::string, const Tensor*>> checkpoint_parts(const Optimizer& opt, bool with_moments);

// A checkpoint's copy of one device's state: the request (filled by TrainingRun) and the
// result (filled by StageOptimizer::copy_state).
struct StateCopy {
  int writer_id = 0;                // ChunkState::writer_id (the device's rank)
  const Context* copier = nullptr;  // where the copies run: a side stream of the device (GPU), or null: its own stream
  bool with_moments = true;         // also the Adam moments (--no-save-optim: false)
  // The next host buffer of `numel` f32 elements to copy into (pinned, reused by every save).
  std::function<const Tensor&(int64_t numel)> staging;
  // Result: per chunk its master weights (and moments), the step they are at, and a fence
  // after the copies (null: done).
  std::vector<ChunkState> chunks;
  int64_t step = 0;
  std::shared_ptr<void> ready;
};

// Whether `w`'s chunks split the MoE experts over an expert group (--expert-model-parallel-size).
bool expert_parallel(StageWorker& w);
// The group that reduces bucket `b` of `w`: a bucket of routed experts over w's
// expert-data-parallel group (null: one rank holds those experts), any other over `dp` (the
// data-parallel group, as the caller holds it).
Collectives* bucket_group(const StageWorker& w, const GradBucket& b, Collectives* dp);
// This rank's shard of `b` under the distributed optimizer: its part among `group`'s ranks
// (null: the whole bucket).
OptimizerShard::Range bucket_shard(const GradBucket& b, const Collectives* group);
// Reduces bucket `b` of w's gradients on `ctx` over its group (bucket_group): an all-reduce, or
// with the distributed optimizer a reduce-scatter into this rank's shard. Both sum gradients
// already scaled by 1 / (the global batch's tokens); an expert's gradient on its expert rank
// already holds the tokens of its whole expert group, so the sums equal one device's gradient.
void reduce_bucket(const Context& ctx, StageWorker& w, const GradBucket& b, Collectives* dp);

class StageOptimizer {
 public:
  // `optimizers`: one per chunk of `worker`; `norm_exclude`: per chunk, the parameter another
  // chunk counts in the global norm (the last stage's copy of a tied embedding), or "".
  StageOptimizer(std::shared_ptr<StageWorker> worker, std::vector<std::unique_ptr<Optimizer>> optimizers,
                 std::vector<std::string> norm_exclude);

  const StageWorker& worker() const { return *worker_; }
  const Context& context() const { return worker_->context(); }
  Optimizer& optimizer(int chunk) { return *optimizers_.at(size_t(chunk)); }
  const Optimizer& optimizer(int chunk) const { return *optimizers_.at(size_t(chunk)); }
  int chunks() const { return int(optimizers_.size()); }

  // After the stage's last op (and the tied embedding's sum): sums the sequence-parallel norm
  // gradients over the tensor-parallel group, then, unless a gradient reducer did it
  // (--overlap-grad-reduce), the gradients over the data-parallel group (all-reduce, or
  // reduce-scatter into this rank's shard with the distributed optimizer), and the next step's
  // delayed FP8 scales. Enqueued on the device. Every layout calls it, one device included.
  void finalize_grads();
  // Over all chunks, the tied duplicate excluded. Synchronizes the device.
  GradStats grad_stats() const;
  // AdamW with gradients * clip / loss_scale on this rank's parameters (its shard, then
  // all-gathered, with the distributed optimizer); zeroes the gradients.
  void apply(float lr, float clip, float loss_scale);
  // A skipped step (inf/nan gradients): zeroes the gradients.
  void skip();
  // The whole step of one device holding the whole model (IterationPlan::local_step): the
  // norm, the clip coefficient and AdamW in one go, as the single-device loop does.
  StepResult step_whole_model(float lr, float loss_scale);
  // A checkpoint's copy of the state as it is now (a whole number of steps: never half an
  // update), enqueued on `copy.copier` after the work enqueued on the device so far; the next
  // update waits for the copies.
  void copy_state(StateCopy& copy);

 private:
  void await_state_readers();

  std::shared_ptr<StageWorker> worker_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::vector<std::string> norm_exclude_;
  std::shared_ptr<void> state_readers_;  // see wait_before_next_step
};

}  // namespace troupe::actors
