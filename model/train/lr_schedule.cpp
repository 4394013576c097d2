#include "model/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"

namespace troupe {

namespace {

// The WSD anneal's coefficient (1 at its start, 0 at its end) at `ratio` of the anneal.
double wsd_coefficient(WsdDecayStyle style, double ratio) {
  switch (style) {
    case WsdDecayStyle::linear:
      return 1.0 - ratio;
    case WsdDecayStyle::cosine:
      return 0.5 * (std::cos(M_PI * ratio) + 1.0);
    case WsdDecayStyle::exponential:
      return 2.0 * std::pow(0.5, ratio) - 1.0;
    case WsdDecayStyle::minus_sqrt:
      return 1.0 - std::sqrt(ratio);
  }
  return 1.0;
}

}  // namespace

double LrSchedule::at(int64_t updates) const {
  const double steps = double(updates) * double(step_size);
  if (warmup_iters > 0 && steps <= warmup_iters) return warmup_init + (lr - warmup_init) * steps / warmup_iters;
  if (style == LrDecayStyle::constant || double(decay_iters) <= warmup_iters) return lr;
  if (steps > double(decay_iters)) return min_lr;
  if (style == LrDecayStyle::inverse_square_root) {
    const double w = std::max(warmup_iters, 1.0), n = std::max(steps, 1.0);
    return std::max(min_lr, lr * std::sqrt(w) / std::sqrt(n));
  }
  const double ratio = (steps - warmup_iters) / (double(decay_iters) - warmup_iters);
  double coeff = 1.0;
  if (style == LrDecayStyle::linear) coeff = 1.0 - ratio;
  if (style == LrDecayStyle::cosine) coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  if (style == LrDecayStyle::wsd) {
    const double anneal_start = double(decay_iters - wsd_decay_iters);
    if (steps > anneal_start)
      coeff = wsd_coefficient(wsd_style, (steps - anneal_start) / double(std::max<int64_t>(wsd_decay_iters, 1)));
  }
  return min_lr + coeff * (lr - min_lr);
}

LrDecayStyle lr_decay_style_from_name(const std::string& name) {
  if (name == "constant") return LrDecayStyle::constant;
  if (name == "linear") return LrDecayStyle::linear;
  if (name == "cosine") return LrDecayStyle::cosine;
  if (name == "inverse-square-root") return LrDecayStyle::inverse_square_root;
  if (name == "WSD") return LrDecayStyle::wsd;
  TROUPE_FAIL("--lr-decay-style must be constant, linear, cosine, inverse-square-root or WSD, got '", name, "'");
}

WsdDecayStyle wsd_decay_style_from_name(const std::string& name) {
  if (name == "linear") return WsdDecayStyle::linear;
  if (name == "cosine") return WsdDecayStyle::cosine;
  if (name == "exponential") return WsdDecayStyle::exponential;
  if (name == "minus_sqrt") return WsdDecayStyle::minus_sqrt;
  TROUPE_FAIL("--lr-wsd-decay-style must be linear, cosine, exponential or minus_sqrt, got '", name, "'");
}

}  // namespace troupe
