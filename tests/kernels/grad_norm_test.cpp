// CPU gradient statistics and the clipping coefficient.
#include <cmath>
#include <limits>

#include "kernels/grad_norm.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

TEST(GradStats, SumOfSquaresOverSeveralTensors) {
  Tensor a = Tensor::host_f32({2}, {3.0f, -4.0f});
  Tensor b = Tensor::host_f32({1, 1}, {12.0f});
  Tensor empty = Tensor::host(DType::f32, {0});
  const GradStats s = grad_stats(cpu(), {a, empty, b});
  EXPECT_TRUE(s.finite);
  EXPECT_EQ(s.sum_sq, 169.0);
  EXPECT_EQ(s.norm(), 13.0);

  const GradStats none = grad_stats(cpu(), {});
  EXPECT_TRUE(none.finite);
  EXPECT_EQ(none.sum_sq, 0.0);
}

TEST(GradStats, SumIsAccumulatedInDouble) {
  Tensor x = random_normal({100003}, 21, 3.0f);
  double expected = 0;
  for (int64_t i = 0; i < x.numel(); ++i) expected += double(x.at(i)) * x.at(i);
  const GradStats s = grad_stats(cpu(), {x});
  EXPECT_NEAR(s.sum_sq, expected, 1e-12 * expected);
}

TEST(GradStats, InfAndNanAnywhereAreFound) {
  const float bad_values[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()};
  for (float bad : bad_values) {
    Tensor a = random_normal({1000}, 22), b = random_normal({777}, 23);
    b.at(776) = bad;
    const GradStats s = grad_stats(cpu(), {a, b});
    EXPECT_FALSE(s.finite) << bad;
    EXPECT_TRUE(std::isnan(s.norm())) << bad;
    EXPECT_TRUE(grad_stats(cpu(), {a}).finite);
  }
}

TEST(GradStats, ClipCoefficient) {
  GradStats s;
  s.sum_sq = 169.0;  // norm 13
  EXPECT_FLOAT_EQ(clip_coefficient(s, 1.0f), float(1.0 / (13.0 + 1e-6)));
  EXPECT_EQ(clip_coefficient(s, 13.5f), 1.0f);  // no clipping below max_norm
  EXPECT_EQ(clip_coefficient(s, 0.0f), 1.0f);   // clipping off
  s.finite = false;
  EXPECT_EQ(clip_coefficient(s, 1.0f), 1.0f);  // the step is skipped anyway
}

TEST(GradStats, NonF32IsAnError) { EXPECT_THROW(grad_stats(cpu(), {Tensor::host(DType::f16, {4})}), Error); }

}  // namespace
}  // namespace troupe::test
