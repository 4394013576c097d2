// CUDA linear layer (cuBLASLt) against the CPU backend, in bf16 and f16, on GPT-2's GEMM
// shapes (M cut to 512) and on odd and misaligned ones.
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/linear.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct LinearShape {
  int64_t m, k, n;
};

struct LinearCase {
  DType dtype;
  LinearShape shape;
};

std::string case_name(const ::testing::TestParamInfo<LinearCase>& info) {
  const auto& s = info.param.shape;
  return str_cat(dtype_name(info.param.dtype), "_M", s.m, "_K", s.k, "_N", s.n);
}

// 16-bit outputs carry ~3 significant digits; f32 gradients from the same rounded inputs
// differ from the CPU only by summation order.
constexpr double kActivationTol = 1e-2;
constexpr double kParamGradTol = 1e-4;

Tensor plus(const Tensor& a, const Tensor& b) {
  Tensor c = Tensor::host(DType::f32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) c.at(i) = a.at(i) + b.at(i);
  return c;
}

// Inputs rounded through the 16-bit type, so the CPU sees exactly what the GPU sees.
struct LinearInputs {
  Tensor x, w, b, dy;  // host f32: [M, K], [N, K], [N], [M, N]
  LinearInputs(LinearShape s, DType t, uint64_t seed)
      : x(round_through(random_normal({s.m, s.k}, seed), t)),
        w(round_through(random_normal({s.n, s.k}, seed + 1, 0.05f), t)),
        b(round_through(random_normal({s.n}, seed + 2), t)),
        dy(round_through(random_normal({s.m, s.n}, seed + 3), t)) {}
};

class LinearCuda : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearCuda, ForwardAndBackwardMatchCpu) {
  const DType t = GetParam().dtype;
  const LinearShape s = GetParam().shape;
  const LinearInputs in(s, t, 100);
  // CPU reference; dw and db start from nonzero values to check they accumulate.
  const Tensor dw0 = random_normal({s.n, s.k}, 7), db0 = random_normal({s.n}, 8);
  Tensor y_ref = Tensor::host(DType::f32, {s.m, s.n}), dx_ref = Tensor::host(DType::f32, {s.m, s.k});
  Tensor dw_ref = plus(dw0, Tensor::zeros(cpu(), DType::f32, dw0.shape()));
  Tensor db_ref = plus(db0, Tensor::zeros(cpu(), DType::f32, db0.shape()));
  linear_forward(cpu(), in.x, in.w, in.b, y_ref);
  linear_backward(cpu(), in.dy, in.x, in.w, dx_ref, dw_ref, db_ref);

  const Tensor x = to_device(gpu(), in.x, t), w = to_device(gpu(), in.w, t), b = to_device(gpu(), in.b, t);
  const Tensor dy = to_device(gpu(), in.dy, t);
  Tensor y = Tensor::empty(gpu(), t, {s.m, s.n}), dx = Tensor::empty(gpu(), t, {s.m, s.k});
  Tensor dw = to_device(gpu(), dw0, DType::f32), db = to_device(gpu(), db0, DType::f32);
  linear_forward(gpu(), x, w, b, y);
  linear_backward(gpu(), dy, x, w, dx, dw, db);

  const double y_err = rel_error(to_host_f32(gpu(), y), y_ref);
  const double dx_err = rel_error(to_host_f32(gpu(), dx), dx_ref);
  const double dw_err = rel_error(to_host_f32(gpu(), dw), dw_ref);
  const double db_err = rel_error(to_host_f32(gpu(), db), db_ref);
  EXPECT_LT(y_err, kActivationTol);
  EXPECT_LT(dx_err, kActivationTol);
  EXPECT_LT(dw_err, kParamGradTol);
  EXPECT_LT(db_err, kParamGradTol);
  std::printf("  rel errors: y %.2e  dx %.2e  dw %.2e  db %.2e\n", y_err, dx_err, dw_err, db_err);
}

const LinearShape kShapes[] = {
    {512, 768, 2304}, {512, 768, 768}, {512, 768, 3072}, {512, 3072, 768}, {512, 768, 50304},  // GPT-2 124M
    {37, 768, 2304},                                                                           // odd M
    {37, 96, 1001},  // odd N: rows of y and dy are not 16-byte aligned
};

std::vector<LinearCase> all_cases() {
  std::vector<LinearCase> cases;
  for (DType t : {DType::bf16, DType::f16})
    for (const LinearShape& s : kShapes) cases.push_back({t, s});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearCuda, ::testing::ValuesIn(all_cases()), case_name);

// The forward with accumulate (y += x w^T + b: inference's residual add in the GEMM), in bf16 and
// in f32 (inference's exact path: FP32 compute, no TF32, so within 1e-5 of the CPU).
class LinearCudaAccumulate : public ::testing::TestWithParam<DType> {};

TEST_P(LinearCudaAccumulate, ForwardAccumulateMatchesCpu) {
  const DType t = GetParam();
  for (const LinearShape& s : {LinearShape{37, 768, 2304}, LinearShape{1, 768, 50304}, LinearShape{37, 96, 1001}}) {
    const LinearInputs in(s, t, 200);
    const Tensor y0 = round_through(random_normal({s.m, s.n}, 9), t);
    Tensor y_ref = plus(y0, Tensor::zeros(cpu(), DType::f32, y0.shape()));
    linear_forward(cpu(), in.x, in.w, in.b, y_ref, /*accumulate=*/true);
    Tensor y = to_device(gpu(), y0, t);
    linear_forward(gpu(), to_device(gpu(), in.x, t), to_device(gpu(), in.w, t), to_device(gpu(), in.b, t), y,
                   /*accumulate=*/true);
    const double err = rel_error(to_host_f32(gpu(), y), y_ref);
    std::printf("  %s %lldx%lldx%lld accumulate: rel error %.2e\n", dtype_name(t), static_cast<long long>(s.m),
                static_cast<long long>(s.k), static_cast<long long>(s.n), err);
    EXPECT_LT(err, t == DType::f32 ? 1e-5 : kActivationTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, LinearCudaAccumulate, ::testing::Values(DType::bf16, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// linear_gelu_forward (inference's fc1: cuBLASLt's GELU epilogue) against the CPU's GEMM then
// gelu_forward, with and without a bias, in bf16 and in f32 (within 1e-5: the epilogue computes
// the same tanh approximation).
TEST_P(LinearCudaAccumulate, GeluEpilogueMatchesCpu) {
  const DType t = GetParam();
  for (const LinearShape& s : {LinearShape{1, 768, 3072}, LinearShape{37, 768, 3072}, LinearShape{5, 96, 1001}})
    for (bool bias : {true, false}) {
      const LinearInputs in(s, t, 300);
      const Tensor b = bias ? in.b : Tensor();
      Tensor y_ref = Tensor::host(DType::f32, {s.m, s.n});
      linear_gelu_forward(cpu(), in.x, in.w, b, y_ref);
      Tensor y = Tensor::empty(gpu(), t, {s.m, s.n});
      linear_gelu_forward(gpu(), to_device(gpu(), in.x, t), to_device(gpu(), in.w, t),
                          bias ? to_device(gpu(), in.b, t) : Tensor(), y);
      const double err = rel_error(to_host_f32(gpu(), y), y_ref);
      std::printf("  %s %lldx%lldx%lld gelu%s: rel error %.2e\n", dtype_name(t), static_cast<long long>(s.m),
                  static_cast<long long>(s.k), static_cast<long long>(s.n), bias ? "+bias" : "", err);
      EXPECT_LT(err, t == DType::f32 ? 1e-5 : kActivationTol);
    }
}

class LinearCudaOptions : public ::testing::TestWithParam<DType> {};

TEST_P(LinearCudaOptions, AccumulateDxWithoutBias) {
  const DType t = GetParam();
  const LinearShape s{64, 128, 192};
  const LinearInputs in(s, t, 200);
  const Tensor dx0 = round_through(random_normal({s.m, s.k}, 9), t);
  Tensor y_ref = Tensor::host(DType::f32, {s.m, s.n}),
         dx_ref = plus(dx0, Tensor::zeros(cpu(), DType::f32, dx0.shape()));
  Tensor dw_ref = Tensor::zeros(cpu(), DType::f32, {s.n, s.k});
  linear_forward(cpu(), in.x, in.w, Tensor(), y_ref);
  linear_backward(cpu(), in.dy, in.x, in.w, dx_ref, dw_ref, Tensor(), /*accumulate_dx=*/true);

  const Tensor x = to_device(gpu(), in.x, t), w = to_device(gpu(), in.w, t), dy = to_device(gpu(), in.dy, t);
  Tensor y = Tensor::empty(gpu(), t, {s.m, s.n}), dx = to_device(gpu(), dx0, t);
  Tensor dw = Tensor::zeros(gpu(), DType::f32, {s.n, s.k});
  linear_forward(gpu(), x, w, Tensor(), y);
  linear_backward(gpu(), dy, x, w, dx, dw, Tensor(), true);
  EXPECT_LT(rel_error(to_host_f32(gpu(), y), y_ref), kActivationTol);
  EXPECT_LT(rel_error(to_host_f32(gpu(), dx), dx_ref), kActivationTol);
  EXPECT_LT(rel_error(to_host_f32(gpu(), dw), dw_ref), kParamGradTol);
}

TEST_P(LinearCudaOptions, UndefinedDxStillAccumulatesDwAndDb) {
  const DType t = GetParam();
  const LinearShape s{40, 64, 96};
  const LinearInputs in(s, t, 300);
  Tensor dw_ref = Tensor::zeros(cpu(), DType::f32, {s.n, s.k}), db_ref = Tensor::zeros(cpu(), DType::f32, {s.n});
  for (int i = 0; i < 2; ++i) linear_backward(cpu(), in.dy, in.x, in.w, Tensor(), dw_ref, db_ref);

  const Tensor x = to_device(gpu(), in.x, t), w = to_device(gpu(), in.w, t), dy = to_device(gpu(), in.dy, t);
  Tensor dw = Tensor::zeros(gpu(), DType::f32, {s.n, s.k}), db = Tensor::zeros(gpu(), DType::f32, {s.n});
  for (int i = 0; i < 2; ++i) linear_backward(gpu(), dy, x, w, Tensor(), dw, db);
  EXPECT_LT(rel_error(to_host_f32(gpu(), dw), dw_ref), kParamGradTol);
  EXPECT_LT(rel_error(to_host_f32(gpu(), db), db_ref), kParamGradTol);
}

// Views at odd element offsets are only 2-byte aligned: the algorithm cache must key on it.
TEST_P(LinearCudaOptions, MisalignedViewsMatchCpu) {
  const DType t = GetParam();
  const LinearShape s{48, 64, 80};
  const LinearInputs in(s, t, 400);
  Tensor y_ref = Tensor::host(DType::f32, {s.m, s.n});
  linear_forward(cpu(), in.x, in.w, in.b, y_ref);

  const Tensor x = to_device(gpu(), in.x, t), w = to_device(gpu(), in.w, t), b = to_device(gpu(), in.b, t);
  Tensor y = Tensor::empty(gpu(), t, {s.m, s.n});
  linear_forward(gpu(), x, w, b, y);  // caches the aligned plan first
  Tensor x_buf = Tensor::empty(gpu(), t, {s.m * s.k + 1}), y_buf = Tensor::empty(gpu(), t, {s.m * s.n + 1});
  Tensor x_odd = x_buf.slice(1, {s.m, s.k}), y_odd = y_buf.slice(1, {s.m, s.n});
  copy(gpu(), x, x_odd);
  linear_forward(gpu(), x_odd, w, b, y_odd);
  EXPECT_LT(rel_error(to_host_f32(gpu(), y), y_ref), kActivationTol);
  EXPECT_LT(rel_error(to_host_f32(gpu(), y_odd), y_ref), kActivationTol);
}

#if TROUPE_HAVE_CUDA  // matmul_lt exists only in CUDA builds; without one this binary only skips
// After tuning, the cached (possibly different) algorithm still computes the same product.
TEST_P(LinearCudaOptions, TunedAlgorithmMatchesCpu) {
  const DType t = GetParam();
  const LinearShape s{256, 256, 384};
  const LinearInputs in(s, t, 500);
  Tensor y_ref = Tensor::host(DType::f32, {s.m, s.n});
  linear_forward(cpu(), in.x, in.w, in.b, y_ref);

  const Tensor x = to_device(gpu(), in.x, t), w = to_device(gpu(), in.w, t), b = to_device(gpu(), in.b, t);
  Tensor y = Tensor::empty(gpu(), t, {s.m, s.n});
  const cuda::MatmulProblem p{&x, false, &w, true, &y, 0.0f, cuda::MatmulEpilogue::bias, &b};
  const std::vector<float> ms = cuda::matmul_lt_tune(gpu(), p, 4, 3);
  ASSERT_FALSE(ms.empty());
  for (float v : ms) EXPECT_GT(v, 0.0f);
  fill_zero(gpu(), y);
  linear_forward(gpu(), x, w, b, y);
  EXPECT_LT(rel_error(to_host_f32(gpu(), y), y_ref), kActivationTol);
}

// cuBLASLt's BGRADB epilogue (row sums of op(A)) on the dw GEMM: db = column sums of dy.
TEST_P(LinearCudaOptions, RowSumsEpilogueGivesBiasGradient) {
  const DType t = GetParam();
  const LinearShape s{128, 64, 96};
  const LinearInputs in(s, t, 600);
  Tensor dw_ref = Tensor::zeros(cpu(), DType::f32, {s.n, s.k}), db_ref = Tensor::zeros(cpu(), DType::f32, {s.n});
  linear_backward(cpu(), in.dy, in.x, in.w, Tensor(), dw_ref, db_ref);

  const Tensor x = to_device(gpu(), in.x, t), dy = to_device(gpu(), in.dy, t);
  Tensor dw = Tensor::zeros(gpu(), DType::f32, {s.n, s.k}), db = Tensor::zeros(gpu(), DType::f32, {s.n});
  cuda::matmul_lt(gpu(), {&dy, true, &x, false, &dw, 0.0f, cuda::MatmulEpilogue::row_sums_of_a, &db});
  EXPECT_LT(rel_error(to_host_f32(gpu(), dw), dw_ref), kParamGradTol);
  EXPECT_LT(rel_error(to_host_f32(gpu(), db), db_ref), kParamGradTol);
}

#endif

TEST_P(LinearCudaOptions, WrongDtypesAreErrors) {
  const DType t = GetParam();
  Tensor x = Tensor::empty(gpu(), t, {4, 8}), w = Tensor::empty(gpu(), t, {3, 8});
  Tensor y = Tensor::empty(gpu(), t, {4, 3}), dy = Tensor::empty(gpu(), t, {4, 3});
  EXPECT_THROW(linear_forward(gpu(), Tensor::empty(gpu(), DType::f32, {4, 8}), w, Tensor(), y), Error);
  EXPECT_THROW(linear_forward(gpu(), x, w, Tensor(), Tensor::empty(gpu(), DType::f32, {4, 3})), Error);
  // Parameter gradients are f32.
  EXPECT_THROW(linear_backward(gpu(), dy, x, w, Tensor(), Tensor::empty(gpu(), t, {3, 8}), Tensor()), Error);
  // Host tensors on a CUDA context.
  EXPECT_THROW(linear_forward(gpu(), Tensor::host(t, {4, 8}), w, Tensor(), y), Error);
}

INSTANTIATE_TEST_SUITE_P(Types, LinearCudaOptions, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace troupe::test
