// The learning-rate schedule's values against Megatron's OptimizerParamScheduler.get_lr formulas
// (megatron/core/optimizer_param_scheduler.py), worked out by hand: warmup, cosine/linear decay,
// inverse-square-root, WSD with each of its anneal shapes, and lengths counted in samples.
#include <gtest/gtest.h>

#include <cmath>

#include "base/check.hpp"
#include "model/train/lr_schedule.hpp"

namespace troupe::test {
namespace {

LrSchedule wsd(WsdDecayStyle anneal) {
  return {.lr = 1.0,
          .min_lr = 0.1,
          .warmup_iters = 10,
          .decay_iters = 110,
          .style = LrDecayStyle::wsd,
          .wsd_decay_iters = 20,
          .wsd_style = anneal};
}

TEST(LrScheduleWsd, FlatUntilTheAnnealThenEachShape) {
  const LrSchedule s = wsd(WsdDecayStyle::exponential);
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);   // warmup
  EXPECT_DOUBLE_EQ(s.at(50), 1.0);  // stable
  EXPECT_DOUBLE_EQ(s.at(90), 1.0);  // the anneal starts after decay - wsd = 90
  // Half-way through the anneal (step 100, ratio 0.5): coefficient per shape, lr = 0.1 + 0.9 coeff.
  EXPECT_NEAR(s.at(100), 0.1 + 0.9 * (2.0 * std::sqrt(0.5) - 1.0), 1e-12);
  EXPECT_NEAR(wsd(WsdDecayStyle::linear).at(100), 0.55, 1e-12);
  EXPECT_NEAR(wsd(WsdDecayStyle::cosine).at(100), 0.55, 1e-12);
  EXPECT_NEAR(wsd(WsdDecayStyle::minus_sqrt).at(100), 0.1 + 0.9 * (1.0 - std::sqrt(0.5)), 1e-12);
  EXPECT_NEAR(wsd(WsdDecayStyle::linear).at(95), 0.1 + 0.9 * 0.75, 1e-12);
  EXPECT_NEAR(wsd(WsdDecayStyle::cosine).at(95), 0.1 + 0.9 * 0.5 * (std::cos(M_PI / 4) + 1), 1e-12);
  for (WsdDecayStyle w :
       {WsdDecayStyle::linear, WsdDecayStyle::cosine, WsdDecayStyle::exponential, WsdDecayStyle::minus_sqrt}) {
    EXPECT_NEAR(wsd(w).at(110), 0.1, 1e-12);  // the anneal ends at min-lr
    EXPECT_DOUBLE_EQ(wsd(w).at(111), 0.1);
  }
}

TEST(LrSchedule, InverseSquareRoot) {
  const LrSchedule s{
      .lr = 1.0, .min_lr = 0.1, .warmup_iters = 4, .decay_iters = 100, .style = LrDecayStyle::inverse_square_root};
  EXPECT_DOUBLE_EQ(s.at(2), 0.5);
  EXPECT_DOUBLE_EQ(s.at(16), 0.5);  // lr sqrt(warmup / step)
  EXPECT_DOUBLE_EQ(s.at(64), 0.25);
  EXPECT_DOUBLE_EQ(s.at(101), 0.1);
}

// Megatron counts samples: an iteration is step_size (the global batch) steps, and a warmup of
// a fraction of the decay need not be a whole number of iterations.
TEST(LrSchedule, StepsCountSamples) {
  const LrSchedule s{.lr = 1.0,
                     .min_lr = 0.1,
                     .warmup_iters = 20,  // samples: 2.5 iterations of 8
                     .decay_iters = 80,
                     .style = LrDecayStyle::linear,
                     .step_size = 8};
  EXPECT_DOUBLE_EQ(s.at(2), 0.8);                        // 16 of 20 warmup samples
  EXPECT_NEAR(s.at(5), 0.1 + 0.9 * (2.0 / 3.0), 1e-12);  // (40 - 20) / (80 - 20) of the decay
  EXPECT_DOUBLE_EQ(s.at(11), 0.1);
}

TEST(LrSchedule, NamesAreMegatrons) {
  EXPECT_EQ(lr_decay_style_from_name("WSD"), LrDecayStyle::wsd);
  EXPECT_EQ(lr_decay_style_from_name("inverse-square-root"), LrDecayStyle::inverse_square_root);
  EXPECT_EQ(wsd_decay_style_from_name("minus_sqrt"), WsdDecayStyle::minus_sqrt);
  EXPECT_THROW(lr_decay_style_from_name("wsd"), Error);
  EXPECT_THROW(wsd_decay_style_from_name("sqrt"), Error);
}

}  // namespace
}  // namespace troupe::test
