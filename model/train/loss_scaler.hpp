// fp16 loss scaling, with Megatron's semantics (megatron/core/optimizer/grad_scaler.py).
//
// The loss is multiplied by scale() before the backward; the optimizer divides the gradients by
// that same scale, checks them for inf/nan and reports the result to update(), which says whether
// the step must be skipped (no optimizer update; the LR scheduler does not advance either) and
// adjusts the scale for the next step:
//
//   const float used = scaler.scale();                    // the scale this step's backward used
//   GradStats s = grad_stats(ctx, grads);                 // of the gradients divided by `used`
//   if (scaler.update(!s.finite)) { ++skipped_iterations; }
//   else adamw_step(..., /*grad_scale=*/clip_coefficient(s, max_norm) / used);
//
// DynamicLossScaler (--fp16): x2 after `window` clean steps in a row; after `hysteresis` inf/nan
// steps the scale halves (not below min_scale) on every further inf/nan step, until it grows
// again: only growth resets the hysteresis count, a clean step does not.
// ConstantLossScaler (--loss-scale X): a fixed scale; inf/nan steps are still skipped.
#pragma once

#include <cstdint>

namespace troupe {

// What a trainer holds (Megatron's MegatronGradScaler).
class LossScaler {
 public:
  virtual ~LossScaler() = default;
  virtual float scale() const = 0;
  float inv_scale() const { return float(1.0 / double(scale())); }
  // Records one step's outcome; returns true when that step must be skipped (found_inf).
  virtual bool update(bool found_inf) = 0;
};

class DynamicLossScaler final : public LossScaler {
 public:
  struct Options {
    float initial_scale = 4294967296.0f;  // 2^32, --initial-loss-scale
    float min_scale = 1.0f;               // --min-loss-scale
    int64_t window = 1000;                // --loss-scale-window: clean steps before the scale doubles
    int64_t hysteresis = 2;               // --hysteresis: inf/nan steps tolerated before it halves
  };
  // Everything that changes, for checkpoints (Megatron saves the same three values).
  struct State {
    float scale = 0.0f;
    int64_t growth_tracker = 0;      // clean steps since the last inf/nan step or growth
    int64_t hysteresis_tracker = 0;  // inf/nan steps left before backing off (<= 0: back off at each)
  };

  DynamicLossScaler();  // Megatron's defaults
  // Throws troupe::Error on invalid options (non-positive values, min_scale > initial_scale).
  explicit DynamicLossScaler(Options options);

  float scale() const override { return state_.scale; }
  bool update(bool found_inf) override;

  const Options& options() const { return options_; }
  const State& state() const { return state_; }
  void restore(const State& state);

 private:
  Options options_;
  State state_;
};

class ConstantLossScaler final : public LossScaler {
 public:
  // Throws troupe::Error unless scale > 0.
  explicit ConstantLossScaler(float scale);

  float scale() const override { return scale_; }
  // The scale never changes; an inf/nan step is skipped.
  bool update(bool found_inf) override { return found_inf; }

 private:
  float scale_;
};

}  // namespace troupe
