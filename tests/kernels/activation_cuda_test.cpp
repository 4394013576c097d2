// CUDA activations against the CPU backend, in bf16 and f16.
#include "kernels/activation.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

class ActivationCuda : public ::testing::TestWithParam<DType> {};

TEST_P(ActivationCuda, GeluMatchesCpu) {
  const DType t = GetParam();
  Tensor x = round_through(random_normal({64, 768}, 1, 2.0f), t);
  Tensor dy = round_through(random_normal({64, 768}, 2), t);
  Tensor y_ref = Tensor::host(DType::f32, x.shape()), dx_ref = Tensor::host(DType::f32, x.shape());
  gelu_forward(cpu(), x, y_ref);
  gelu_backward(cpu(), dy, x, dx_ref);

  Tensor xd = to_device(gpu(), x, t), dyd = to_device(gpu(), dy, t);
  Tensor yd = Tensor::empty(gpu(), t, x.shape()), dxd = Tensor::empty(gpu(), t, x.shape());
  gelu_forward(gpu(), xd, yd);
  gelu_backward(gpu(), dyd, xd, dxd);
  EXPECT_LT(rel_error(to_host_f32(gpu(), yd), y_ref), 1e-2);
  EXPECT_LT(rel_error(to_host_f32(gpu(), dxd), dx_ref), 1e-2);
}

TEST_P(ActivationCuda, SwigluMatchesCpu) {
  const DType t = GetParam();
  Tensor x = round_through(random_normal({32, 2 * 512}, 3), t);
  Tensor dy = round_through(random_normal({32, 512}, 4), t);
  Tensor y_ref = Tensor::host(DType::f32, dy.shape()), dx_ref = Tensor::host(DType::f32, x.shape());
  swiglu_forward(cpu(), x, y_ref);
  swiglu_backward(cpu(), dy, x, dx_ref);

  Tensor xd = to_device(gpu(), x, t), dyd = to_device(gpu(), dy, t);
  Tensor yd = Tensor::empty(gpu(), t, dy.shape()), dxd = Tensor::empty(gpu(), t, x.shape());
  swiglu_forward(gpu(), xd, yd);
  swiglu_backward(gpu(), dyd, xd, dxd);
  EXPECT_LT(rel_error(to_host_f32(gpu(), yd), y_ref), 1e-2);
  EXPECT_LT(rel_error(to_host_f32(gpu(), dxd), dx_ref), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Types, ActivationCuda, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace troupe::test
