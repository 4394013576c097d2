// CUDA activations against the CPU backend, in bf16 and f16; the GELU's FP8 side output against
// the unfused cast and the CPU's.
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

// The GELU's backward with the bias gradient of its output's columns, against the CPU's; 3000
// rows run several chunks of the column sum, 4096 columns several column blocks, 100 columns
// (no multiple of a 16-byte pack) the element-wise path.
TEST_P(ActivationCuda, GeluBackwardBiasGradMatchesCpu) {
  const DType t = GetParam();
  for (const Shape& shape : {Shape{64, 768}, Shape{3000, 4096}, Shape{50, 100}}) {
    const Tensor x = round_through(random_normal(shape, 6, 2.0f), t);
    const Tensor dy = round_through(random_normal(shape, 7), t);
    const Tensor db0 = random_normal({shape[1]}, 8);
    Tensor dx_ref = Tensor::host(DType::f32, shape), db_ref = Tensor::host(DType::f32, {shape[1]});
    copy(cpu(), db0, db_ref);
    gelu_backward_bias_grad(cpu(), dy, x, dx_ref, db_ref);

    const Tensor xd = to_device(gpu(), x, t), dyd = to_device(gpu(), dy, t);
    Tensor dxd = Tensor::empty(gpu(), t, shape), dbd = to_device(gpu(), db0, DType::f32);
    gelu_backward_bias_grad(gpu(), dyd, xd, dxd, dbd);
    EXPECT_LT(rel_error(to_host_f32(gpu(), dxd), dx_ref), 1e-2) << shape_str(shape);
    EXPECT_LT(rel_error(to_host_f32(gpu(), dbd), db_ref), 1e-2) << shape_str(shape);
    // In place (dx aliasing dy), as the MLP's backward runs it.
    Tensor inplace = to_device(gpu(), dy, t), db2 = to_device(gpu(), db0, DType::f32);
    gelu_backward_bias_grad(gpu(), inplace, xd, inplace, db2);
    EXPECT_EQ(rel_error(to_host_f32(gpu(), inplace), to_host_f32(gpu(), dxd)), 0.0);
    EXPECT_EQ(rel_error(to_host_f32(gpu(), db2), to_host_f32(gpu(), dbd)), 0.0);
  }
}

// The GELU writing fc2's input cast in its own pass (an FP8 MLP): y as without it, q and amax
// bit for bit those of fp8_cast after the GELU on CUDA and on the CPU (on the same y), and the
// amax alone (tensorwise); 4096x3072 runs the grid-stride loop of the capped grid.
TEST_P(ActivationCuda, GeluFp8SideOutputIsTheCastOfTheOutput) {
  const DType t = GetParam();
  const Tensor scale_host = Tensor::host_f32({1}, {19.0f}), scale = to_device(gpu(), scale_host, DType::f32);
  for (const Shape& shape : {Shape{64, 768}, Shape{4096, 3072}}) {
    const Tensor x = to_device(gpu(), round_through(random_normal(shape, 5, 2.0f), t), t);
    Tensor y_ref = Tensor::empty(gpu(), t, shape), q_ref = Tensor::empty(gpu(), DType::u8, shape);
    Tensor amax_ref = Tensor::zeros(gpu(), DType::f32, {1});
    gelu_forward(gpu(), x, y_ref);
    fp8_cast(gpu(), y_ref, scale, Fp8Format::e4m3, q_ref, amax_ref);
    Tensor y = Tensor::empty(gpu(), t, shape), q = Tensor::empty(gpu(), DType::u8, shape);
    Tensor amax = Tensor::zeros(gpu(), DType::f32, {1}), amax_only = Tensor::zeros(gpu(), DType::f32, {1});
    gelu_forward(gpu(), x, y, {q, scale, amax});
    const std::string what = str_cat(dtype_name(t), " ", shape_str(shape));
    const Tensor y_host = to_host_f32(gpu(), y);
    EXPECT_EQ(max_abs_diff(y_host, to_host_f32(gpu(), y_ref)), 0.0) << what;
    EXPECT_EQ(byte_mismatches(q, q_ref), 0) << what << " q against the unfused cast";
    const float want = to_host_f32(gpu(), amax_ref).at(0);
    EXPECT_GT(want, 0.0f) << what;
    EXPECT_EQ(to_host_f32(gpu(), amax).at(0), want) << what;
    Tensor q_cpu = Tensor::host(DType::u8, shape), amax_cpu = Tensor::host_f32({1}, {0.0f});
    fp8_cast(cpu(), y_host, scale_host, Fp8Format::e4m3, q_cpu, amax_cpu);
    EXPECT_EQ(byte_mismatches(q, q_cpu), 0) << what << " q against the CPU's cast of y";
    EXPECT_EQ(amax_cpu.at(0), want) << what;
    gelu_forward(gpu(), x, y, {Tensor(), Tensor(), amax_only});
    EXPECT_EQ(to_host_f32(gpu(), amax_only).at(0), want) << what << " amax alone";
  }
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
