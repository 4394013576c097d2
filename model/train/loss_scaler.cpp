#include "model/train/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"

namespace troupe {

namespace {
// Megatron builds its DynamicGradScaler with these factors fixed.
constexpr float kGrowthFactor = 2.0f;
constexpr float kBackoffFactor = 0.5f;
}  // namespace

DynamicLossScaler::DynamicLossScaler() : DynamicLossScaler(Options{}) {}

DynamicLossScaler::DynamicLossScaler(Options options) : options_(options) {
  TROUPE_CHECK(std::isfinite(options.initial_scale) && options.initial_scale > 0.0f,
               "loss scaler: initial scale must be a positive number, got ", options.initial_scale);
  TROUPE_CHECK(options.min_scale > 0.0f && options.min_scale <= options.initial_scale,
               "loss scaler: min scale must be in (0, initial scale = ", options.initial_scale, "], got ",
               options.min_scale);
  TROUPE_CHECK(options.window > 0, "loss scaler: loss-scale window must be > 0, got ", options.window);
  TROUPE_CHECK(options.hysteresis > 0, "loss scaler: hysteresis must be > 0, got ", options.hysteresis);
  state_ = State{options.initial_scale, 0, options.hysteresis};
}

bool DynamicLossScaler::update(bool found_inf) {
  if (found_inf) {
    state_.growth_tracker = 0;
    --state_.hysteresis_tracker;
    if (state_.hysteresis_tracker <= 0) state_.scale = std::max(state_.scale * kBackoffFactor, options_.min_scale);
    return true;
  }
  if (++state_.growth_tracker == options_.window) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker = options_.hysteresis;
    state_.scale *= kGrowthFactor;
  }
  return false;
}

void DynamicLossScaler::restore(const State& state) {
  TROUPE_CHECK(state.scale > 0.0f && state.growth_tracker >= 0 && state.growth_tracker < options_.window,
               "loss scaler: invalid saved state (scale ", state.scale, ", growth tracker ", state.growth_tracker,
               ", window ", options_.window, ")");
  state_ = state;
}

ConstantLossScaler::ConstantLossScaler(float scale) : scale_(scale) {
  TROUPE_CHECK(std::isfinite(scale) && scale > 0.0f, "loss scaler: --loss-scale must be a positive number, got ",
               scale);
}

}  // namespace troupe
