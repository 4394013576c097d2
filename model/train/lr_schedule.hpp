// Learning-rate schedule with Megatron's semantics (OptimizerParamScheduler):
// linear warmup from --lr-warmup-init to --lr over --lr-warmup-iters, then decay to
// --min-lr by --lr-decay-iters (linear | cosine | constant), min-lr afterwards.
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

enum class LrDecayStyle { constant, linear, cosine };

struct LrSchedule {
  double lr = 1e-3;
  double min_lr = 0.0;
  double warmup_init = 0.0;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;  // 0: no decay after warmup
  LrDecayStyle style = LrDecayStyle::linear;

  // Learning rate for 1-based iteration `step`.
  double at(int64_t step) const;
};

LrDecayStyle lr_decay_style_from_name(const std::string& name);

}  // namespace troupe
