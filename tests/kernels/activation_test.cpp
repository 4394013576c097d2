// CPU activations against finite differences; the GELU's FP8 side output is the cast of its output.
#include <cmath>

#include "kernels/activation.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

TEST(Activation, GeluBackwardMatchesFiniteDifferences) {
  Tensor x = random_normal({4, 16}, 1, 2.0f);
  Tensor y = Tensor::host(DType::f32, x.shape()), r = random_normal(x.shape(), 2);
  auto loss = [&] {
    gelu_forward(cpu(), x, y);
    return dot(y, r);
  };
  Tensor dx = Tensor::host(DType::f32, x.shape());
  gelu_backward(cpu(), r, x, dx);
  expect_grad_close("gelu dx", loss, x, dx);
}

TEST(Activation, GeluKnownValues) {
  Tensor x = Tensor::host_f32({4}, {0.0f, 1.0f, -1.0f, 3.0f});
  Tensor y = Tensor::host(DType::f32, {4});
  gelu_forward(cpu(), x, y);
  // 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))), computed by hand in f64.
  EXPECT_NEAR(y.at(0), 0.0, 1e-7);
  EXPECT_NEAR(y.at(1), 0.8411919906082768, 1e-6);
  EXPECT_NEAR(y.at(2), -0.15880800939172324, 1e-6);
  EXPECT_NEAR(y.at(3), 2.9963627388, 1e-5);
}

TEST(Activation, SwigluBackwardMatchesFiniteDifferences) {
  Tensor x = random_normal({3, 2 * 8}, 3, 1.5f);
  Tensor y = Tensor::host(DType::f32, {3, 8}), r = random_normal({3, 8}, 4);
  auto loss = [&] {
    swiglu_forward(cpu(), x, y);
    return dot(y, r);
  };
  Tensor dx = Tensor::host(DType::f32, x.shape());
  swiglu_backward(cpu(), r, x, dx);
  expect_grad_close("swiglu dx", loss, x, dx);
}

TEST(Activation, GeluFp8SideOutputIsTheCastOfTheOutput) {
  const Tensor x = random_normal({4, 16}, 3, 2.0f), scale = Tensor::host_f32({1}, {30.0f});
  Tensor y_ref = Tensor::host(DType::f32, x.shape()), q_ref = Tensor::host(DType::u8, x.shape());
  Tensor amax_ref = Tensor::host_f32({1}, {0.0f});
  gelu_forward(cpu(), x, y_ref);
  fp8_cast(cpu(), y_ref, scale, Fp8Format::e4m3, q_ref, amax_ref);
  Tensor y = Tensor::host(DType::f32, x.shape()), q = Tensor::host(DType::u8, x.shape());
  Tensor amax = Tensor::host_f32({1}, {0.0f});
  gelu_forward(cpu(), x, y, {q, scale, amax});
  EXPECT_EQ(max_abs_diff(y, y_ref), 0.0);
  EXPECT_EQ(byte_mismatches(q, q_ref), 0);
  EXPECT_GT(amax_ref.at(0), 0.0f);
  EXPECT_EQ(amax.at(0), amax_ref.at(0));
  EXPECT_THROW(gelu_forward(cpu(), x, y, {Tensor::host(DType::u8, {4, 8}), scale, Tensor()}), Error);
}

// The GELU's backward that also sums its output's columns: dx as gelu_backward's, and db
// accumulated (it starts nonzero) by exactly dx's column sums.
TEST(Activation, GeluBackwardBiasGradSumsItsOutput) {
  const Tensor x = random_normal({37, 24}, 3, 2.0f), dy = random_normal({37, 24}, 4);
  Tensor dx_ref = Tensor::host(DType::f32, x.shape());
  gelu_backward(cpu(), dy, x, dx_ref);
  const Tensor db0 = random_normal({24}, 5);
  Tensor db = Tensor::host(DType::f32, {24}), dx = Tensor::host(DType::f32, x.shape());
  copy(cpu(), db0, db);
  gelu_backward_bias_grad(cpu(), dy, x, dx, db);
  EXPECT_EQ(rel_error(dx, dx_ref), 0.0);
  for (int64_t c = 0; c < 24; ++c) {
    double sum = db0.data_as<float>()[c];
    for (int64_t r = 0; r < 37; ++r) sum += dx_ref.data_as<float>()[r * 24 + c];
    EXPECT_NEAR(db.data_as<float>()[c], sum, 1e-4 * (1.0 + std::abs(sum))) << "column " << c;
  }
  EXPECT_THROW(gelu_backward_bias_grad(cpu(), dy, x, dx, Tensor::host(DType::f32, {23})), Error);
}

TEST(Activation, ShapeMismatchIsAnError) {
  Tensor x = Tensor::host(DType::f32, {2, 8}), y = Tensor::host(DType::f32, {2, 7});
  EXPECT_THROW(gelu_forward(cpu(), x, y), Error);
  EXPECT_THROW(swiglu_forward(cpu(), x, y), Error);
}

}  // namespace
}  // namespace troupe::test
