// Learning-rate schedule with Megatron's semantics (OptimizerParamScheduler.get_lr):
// linear warmup from --lr-warmup-init to --lr over the warmup steps, then decay to --min-lr by
// the decay steps (constant | linear | cosine | inverse-square-root | WSD), min-lr afterwards.
// WSD stays at --lr until the last `wsd_decay_iters` steps before `decay_iters`, then anneals
// (linear | cosine | exponential | minus_sqrt).
//
// Lengths count scheduler steps; an iteration advances `step_size` steps. Megatron counts
// samples (step_size = global batch size), which keeps --lr-warmup-samples and
// --lr-warmup-fraction exact; step_size 1 counts iterations.
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

enum class LrDecayStyle { constant, linear, cosine, inverse_square_root, wsd };
enum class WsdDecayStyle { linear, cosine, exponential, minus_sqrt };

struct LrSchedule {
  double lr = 1e-3;
  double min_lr = 0.0;
  double warmup_init = 0.0;
  double warmup_iters = 0;  // steps; fractional with --lr-warmup-fraction
  int64_t decay_iters = 0;  // steps; 0: no decay after warmup
  LrDecayStyle style = LrDecayStyle::linear;
  int64_t wsd_decay_iters = 0;  // steps of the final WSD anneal
  WsdDecayStyle wsd_style = WsdDecayStyle::exponential;
  int64_t step_size = 1;  // steps per iteration

  // Learning rate for 1-based iteration `step` (Megatron's num_steps = step x step_size).
  double at(int64_t step) const;
};

// Megatron's --lr-decay-style and --lr-wsd-decay-style names.
LrDecayStyle lr_decay_style_from_name(const std::string& name);
WsdDecayStyle wsd_decay_style_from_name(const std::string& name);

}  // namespace troupe
