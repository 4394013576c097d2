// The optimizer of one model chunk: f32 master weights and Adam moments for the chunk's
// flat parameter buffer, global-norm gradient clipping, and the inf/nan check that fp16
// loss scaling needs. On a CPU chunk the f32 parameters are the master weights.
//
//   Optimizer opt(chunk, {.adam = {...}, .clip_grad = 1.0f});
//   StepResult r = opt.step(lr, /*loss_scale=*/1.0f);   // then the chunk's grads are zeroed
#pragma once

#include <string>

#include "kernels/adamw.hpp"
#include "kernels/grad_norm.hpp"
#include "model/gpt_chunk.hpp"

namespace troupe {

struct OptimizerConfig {
  AdamWConfig adam;
  float clip_grad = 1.0f;  // max global grad norm; <= 0 disables clipping
};

struct StepResult {
  bool skipped = false;    // inf/nan in the gradients: parameters untouched
  double grad_norm = 0.0;  // of the unscaled gradients (NaN when skipped)
};

// The elements of a chunk's flat buffers an optimizer owns: the distributed optimizer's
// data-parallel shard (ZeRO-1), one range [begin, end) per gradient bucket. Empty: the whole buffer.
struct OptimizerShard {
  struct Range {
    int64_t begin = 0, end = 0;
  };
  std::vector<Range> ranges;
  int64_t numel() const;
};

class Optimizer {
 public:
  // With a shard, master weights and moments exist for the shard only; apply() updates the
  // shard's parameters (the caller all-gathers them) from the shard's (reduce-scattered) gradients.
  Optimizer(GptChunk& chunk, const OptimizerConfig& config, OptimizerShard shard = {});

  // Unscales the gradients by 1/loss_scale, clips, applies AdamW with `lr`, and zeroes
  // the gradients. Skips the update when any gradient is inf/nan.
  StepResult step(float lr, float loss_scale = 1.0f);

  // step() in two halves, for a model split over several chunks (pipeline stages) whose
  // clipping uses the GLOBAL norm: each chunk reports grad_stats(), the caller sums them
  // (sum_sq adds, finite ands) and applies the same coefficient everywhere.
  //   GradStats g = sum of opt_i.grad_stats();  float clip = clip_coefficient(unscaled g, max);
  //   for each i: g.finite ? opt_i.apply(lr, clip, loss_scale) : opt_i.skip();
  // `exclude` names a parameter counted by another chunk (the second copy of a tied embedding).
  // Gradients are still multiplied by the loss scale. Synchronizes (the numbers go to the host).
  // Counts the shard's elements only, and a parameter every tensor-parallel rank holds whole
  // on rank 0 only. `part` picks the routed experts' parameters or the others (under expert
  // parallelism the experts' squares are summed over the expert group, the others' not).
  enum class NormPart { all, dense, experts };
  GradStats grad_stats(const std::string& exclude = "", NormPart part = NormPart::all) const;
  const OptimizerShard& shard() const { return shard_; }
  // AdamW with gradients * clip / loss_scale, then zeroes the gradients.
  void apply(float lr, float clip, float loss_scale);
  // A skipped step (inf/nan gradients): zeroes the gradients, parameters untouched.
  void skip();
  int64_t iteration() const { return step_; }
  // Checkpoint load: host f32 master weights and moments of the whole chunk (layout().size()
  // elements, the params' offsets) and the step count; rewrites the chunk's parameters from
  // the master weights and keeps this optimizer's shard of the moments.
  void restore(const Tensor& master, const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t step);
  // The shard's f32 state (the shard's ranges of the flat buffers, one after another).
  const Tensor& master() const { return master_; }
  const Tensor& exp_avg() const { return m_; }
  const Tensor& exp_avg_sq() const { return v_; }

 private:
  GptChunk& chunk_;
  OptimizerConfig config_;
  OptimizerShard shard_;
  Tensor master_, m_, v_;                            // f32 [shard size]: the ranges one after another
  std::vector<std::vector<ParamSegment>> segments_;  // per range, relative to its start in master_
  int64_t step_ = 0;
};

}  // namespace troupe
