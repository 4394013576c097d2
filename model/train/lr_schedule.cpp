#include "model/train/lr_schedule.hpp"

#include <cmath>

#include "base/check.hpp"

namespace troupe {

double LrSchedule::at(int64_t step) const {
  if (warmup_iters > 0 && step <= warmup_iters)
    return warmup_init + (lr - warmup_init) * double(step) / double(warmup_iters);
  if (style == LrDecayStyle::constant || decay_iters <= warmup_iters) return lr;
  if (step > decay_iters) return min_lr;
  const double ratio = double(step - warmup_iters) / double(decay_iters - warmup_iters);
  const double coeff = style == LrDecayStyle::linear ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (lr - min_lr);
}

LrDecayStyle lr_decay_style_from_name(const std::string& name) {
  if (name == "constant") return LrDecayStyle::constant;
  if (name == "linear") return LrDecayStyle::linear;
  if (name == "cosine") return LrDecayStyle::cosine;
  TROUPE_FAIL("--lr-decay-style must be constant, linear or cosine, got '", name, "'");
}

}  // namespace troupe
