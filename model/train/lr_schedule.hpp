// Learning-rate schedule with Megatron's semantics (OptimizerParamScheduler.get_lr):
// linear warmup from --lr-warmup-init to --lr over the warmup steps, then decay to --min-lr by
// the decay steps (constant | linear | cosine | inverse-square-root | WSD), min-lr afterwards.
// WSD stays at --lr until the last `wsd_decay_iters` steps before `decay_iters`, then anneals
// (linear | cosine | exponential | minus_sqrt).
//
// Lengths count scheduler steps; a successful optimizer step advances `step_size` steps.
// Megatron counts samples (step_size = global batch size), which keeps --lr-warmup-samples and
// --lr-warmup-fraction exact; step_size 1 counts iterations.
//
// When the schedule advances is Megatron's (training.py train_step): the scheduler starts at 0
// steps and is stepped after each *successful* optimizer step, so the iteration after
// `updates` successful steps applies at(updates): iteration 1 applies at(0) (the warmup's
// initial lr), and an iteration skipped for inf/NaN gradients leaves the schedule where it was.
// Megatron's log line shows the scheduler's lr after the iteration's step: at(updates after it).
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
  int64_t step_size = 1;  // steps per successful optimizer step (the global batch, in samples)

  // Learning rate after `updates` successful optimizer steps (Megatron's num_steps = updates x
  // step_size): the lr the next iteration applies.
  double at(int64_t updates) const;
};

// Megatron's --lr-decay-style and --lr-wsd-decay-style names.
LrDecayStyle lr_decay_style_from_name(const std::string& name);
WsdDecayStyle wsd_decay_style_from_name(const std::string& name);

}  // namespace troupe
