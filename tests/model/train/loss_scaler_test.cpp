// The dynamic loss scaler against Megatron's trajectory, step by step.
#include <cmath>

#include <gtest/gtest.h>

#include "base/check.hpp"
#include "model/train/loss_scaler.hpp"

namespace troupe {
namespace {

constexpr float k2to32 = 4294967296.0f;

TEST(DynamicLossScaler, MegatronDefaults) {
  DynamicLossScaler s;
  EXPECT_EQ(s.scale(), k2to32);
  EXPECT_EQ(s.options().min_scale, 1.0f);
  EXPECT_EQ(s.options().window, 1000);
  EXPECT_EQ(s.options().hysteresis, 2);
  for (int i = 0; i < 999; ++i) ASSERT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), k2to32);  // 999 clean steps: not yet
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 2 * k2to32);  // the 1000th doubles it
}

// One step at a time: what the step found, and the scale after it (update() returns found_inf).
struct Step {
  bool found_inf;
  float scale_after;
};

TEST(DynamicLossScaler, HysteresisAndGrowthTrajectory) {
  DynamicLossScaler s({/*initial_scale=*/1024.0f, /*min_scale=*/1.0f, /*window=*/3, /*hysteresis=*/2});
  const Step steps[] = {
      {true, 1024},                               // 1st inf: tolerated (hysteresis 2 -> 1)
      {false, 1024},                              // a clean step does NOT restore the hysteresis budget
      {true, 512},                                // 2nd inf: budget spent -> halve
      {true, 256},                                // and every further inf halves again
      {false, 256},  {false, 256}, {false, 512},  // 3 clean in a row: double, budget back to 2
      {true, 512},                                // tolerated again
      {false, 512},  {false, 512}, {true, 256},   // 2nd inf since the growth; also restarts the clean-step count
      {false, 256},  {false, 256}, {false, 512},
  };
  int i = 0;
  for (const Step& step : steps) {
    EXPECT_EQ(s.update(step.found_inf), step.found_inf) << "step " << i;
    EXPECT_EQ(s.scale(), step.scale_after) << "step " << i;
    ++i;
  }
}

TEST(DynamicLossScaler, NeverBelowMinScale) {
  DynamicLossScaler s({8.0f, 2.0f, 1000, 1});
  const float expected[] = {4, 2, 2, 2};
  for (float e : expected) {
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), e);
  }
  EXPECT_EQ(s.inv_scale(), 0.5f);
}

TEST(DynamicLossScaler, StateRoundTrips) {
  DynamicLossScaler a({64.0f, 1.0f, 4, 3});
  for (bool inf : {true, false, false}) a.update(inf);
  DynamicLossScaler b({64.0f, 1.0f, 4, 3});
  b.restore(a.state());
  for (bool inf : {false, false, true, true, true, false}) {
    EXPECT_EQ(a.update(inf), b.update(inf));
    EXPECT_EQ(a.scale(), b.scale());
  }
  EXPECT_EQ(a.state().growth_tracker, b.state().growth_tracker);
  EXPECT_EQ(a.state().hysteresis_tracker, b.state().hysteresis_tracker);
}

TEST(DynamicLossScaler, BadOptionsAreErrors) {
  EXPECT_THROW(DynamicLossScaler({0.0f, 1.0f, 10, 2}), Error);
  EXPECT_THROW(DynamicLossScaler({1.0f, 2.0f, 10, 2}), Error);  // min > initial
  EXPECT_THROW(DynamicLossScaler({4.0f, 1.0f, 0, 2}), Error);
  EXPECT_THROW(DynamicLossScaler({4.0f, 1.0f, 10, 0}), Error);
}

TEST(ConstantLossScaler, FixedScaleStillSkipsInfSteps) {
  ConstantLossScaler s(128.0f);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 128.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f / 128.0f);
  EXPECT_THROW(ConstantLossScaler(0.0f), Error);
  EXPECT_THROW(ConstantLossScaler(std::nanf("")), Error);
}

}  // namespace
}  // namespace troupe
