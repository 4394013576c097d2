// CUDA linear layer (cuBLASLt, and the small-batch GEMV of decode steps) against the CPU
// backend, in bf16 and f16, on GPT-2's GEMM shapes (M cut to 512; M = 1 to 8 for the GEMV) and
// on odd and misaligned ones.
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemv.hpp"
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

// Zero-bubble's split backward: dx alone, then dw and db alone, gives the fused op's bits.
TEST_P(LinearCudaOptions, SplitBackwardEqualsTheWholeOp) {
  const DType t = GetParam();
  const LinearShape s{48, 64, 96};
  const LinearInputs in(s, t, 400);
  const Tensor x = to_device(gpu(), in.x, t), w = to_device(gpu(), in.w, t), dy = to_device(gpu(), in.dy, t);
  Tensor dx = Tensor::zeros(gpu(), t, {s.m, s.k}), dw = Tensor::zeros(gpu(), DType::f32, {s.n, s.k}),
         db = Tensor::zeros(gpu(), DType::f32, {s.n});
  Tensor dx_split = Tensor::zeros(gpu(), t, {s.m, s.k}), dw_split = Tensor::zeros(gpu(), DType::f32, {s.n, s.k}),
         db_split = Tensor::zeros(gpu(), DType::f32, {s.n});
  linear_backward(gpu(), dy, x, w, dx, dw, db);
  linear_backward(gpu(), dy, x, w, dx_split, Tensor(), Tensor());
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), dx_split), to_host_f32(gpu(), dx)), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), dw_split), Tensor::zeros(cpu(), DType::f32, {s.n, s.k})), 0.0);
  linear_backward(gpu(), dy, x, w, Tensor(), dw_split, db_split);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), dw_split), to_host_f32(gpu(), dw)), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), db_split), to_host_f32(gpu(), db)), 0.0);
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

// The search beyond the heuristic (matmul_lt_search) lists and times configurations, never keeps
// one slower than the heuristic's, and the one it caches still computes the product; a searched
// GEMM must overwrite its output.
TEST_P(LinearCudaOptions, SearchedAlgorithmMatchesCpu) {
  const DType t = GetParam();
  const LinearShape s{256, 256, 384};
  const LinearInputs in(s, t, 550);
  Tensor y_ref = Tensor::host(DType::f32, {s.m, s.n});
  linear_forward(cpu(), in.x, in.w, in.b, y_ref);

  const Tensor x = to_device(gpu(), in.x, t), w = to_device(gpu(), in.w, t), b = to_device(gpu(), in.b, t);
  Tensor y = Tensor::empty(gpu(), t, {s.m, s.n});
  const cuda::MatmulProblem p{&x, false, &w, true, &y, 0.0f, cuda::MatmulEpilogue::bias, &b};
  const cuda::MatmulSearch r = cuda::matmul_lt_search(gpu(), p, 64, 2);
  EXPECT_GT(r.configs, 1);
  EXPECT_EQ(r.timed, std::min(r.configs, 64));
  EXPECT_GT(r.best_ms, 0.0f);
  EXPECT_LE(r.best_ms, r.heuristic_ms);
  std::printf("  searched %d of %d: heuristic %.4f ms, best %.4f ms (%s)\n", r.timed, r.configs, r.heuristic_ms,
              r.best_ms, r.best.c_str());
  fill_zero(gpu(), y);
  linear_forward(gpu(), x, w, b, y);
  EXPECT_LT(rel_error(to_host_f32(gpu(), y), y_ref), kActivationTol);

  const cuda::ScopedGemmSearch on(true);
  fill_zero(gpu(), y);
  cuda::matmul_lt_searched(gpu(), p);
  EXPECT_LT(rel_error(to_host_f32(gpu(), y), y_ref), kActivationTol);
  cuda::MatmulProblem accumulate = p;
  accumulate.beta = 1.0f;
  EXPECT_THROW(cuda::matmul_lt_searched(gpu(), accumulate), Error);
  Tensor square = Tensor::empty(gpu(), t, {s.m, s.m});  // y = y w'^T: the output is an input
  const Tensor w_square = to_device(gpu(), round_through(random_normal({s.m, s.m}, 551, 0.05f), t), t);
  EXPECT_THROW(cuda::matmul_lt_searched(gpu(), {&square, false, &w_square, true, &square, 0.0f}), Error);
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

#if TROUPE_HAVE_CUDA
// TROUPE_GEMM_SEARCH (on | off, unset on) and ScopedGemmSearch, which wins over it; no GPU needed.
TEST(GemmSearchSwitch, EnvironmentAndScope) {
  ::unsetenv("TROUPE_GEMM_SEARCH");
  EXPECT_TRUE(cuda::gemm_search_on());
  {
    const ScopedEnv env("TROUPE_GEMM_SEARCH", "off");
    EXPECT_FALSE(cuda::gemm_search_on());
    const cuda::ScopedGemmSearch on(true);
    EXPECT_TRUE(cuda::gemm_search_on());
  }
  const ScopedEnv env("TROUPE_GEMM_SEARCH", "sometimes");
  try {
    cuda::gemm_search_on();
    ADD_FAILURE() << "TROUPE_GEMM_SEARCH=sometimes was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TROUPE_GEMM_SEARCH=sometimes"), std::string::npos) << e.what();
  }
  const cuda::ScopedGemmSearch off(false);
  EXPECT_FALSE(cuda::gemm_search_on());
}
#endif

// Decode-step shapes the GEMV cannot take (K % 8 != 0; x at an odd element offset) fall back to
// cuBLASLt and are still right.
TEST_P(LinearCudaOptions, DecodeShapesTheGemvCannotTakeFallBack) {
  const DType t = GetParam();
  for (const LinearShape& s : {LinearShape{3, 100, 50}, LinearShape{1, 36, 7}}) {
    const LinearInputs in(s, t, 800);
    Tensor y_ref = Tensor::host(DType::f32, {s.m, s.n});
    linear_forward(cpu(), in.x, in.w, in.b, y_ref);
    const Tensor x = to_device(gpu(), in.x, t), w = to_device(gpu(), in.w, t), b = to_device(gpu(), in.b, t);
    Tensor y = Tensor::empty(gpu(), t, {s.m, s.n});
    EXPECT_FALSE(cuda::gemv_supports(x, w, y));
    linear_forward(gpu(), x, w, b, y);
    EXPECT_LT(rel_error(to_host_f32(gpu(), y), y_ref), kActivationTol);
  }
  const LinearShape s{2, 64, 80};
  const LinearInputs in(s, t, 900);
  Tensor y_ref = Tensor::host(DType::f32, {s.m, s.n});
  linear_forward(cpu(), in.x, in.w, in.b, y_ref);
  const Tensor w = to_device(gpu(), in.w, t), b = to_device(gpu(), in.b, t);
  Tensor x_buf = Tensor::empty(gpu(), t, {s.m * s.k + 1}), y = Tensor::empty(gpu(), t, {s.m, s.n});
  const Tensor x_odd = x_buf.slice(1, {s.m, s.k});
  copy(gpu(), to_device(gpu(), in.x, t), x_odd);
  EXPECT_TRUE(cuda::gemv_supports(to_device(gpu(), in.x, t), w, y));
  EXPECT_FALSE(cuda::gemv_supports(x_odd, w, y));
  linear_forward(gpu(), x_odd, w, b, y);
  EXPECT_LT(rel_error(to_host_f32(gpu(), y), y_ref), kActivationTol);
}

// The small-batch GEMV (kernels/cuda/gemv.hpp) at every decode batch size it takes, on GPT-2
// 124M's decode linears, with and without a bias: through linear_forward / linear_gelu_forward
// (the GEMV unless TROUPE_DECODE_GEMV=0) and through gemv_forward itself.
enum class GemvOp { plain, gelu, accumulate };

struct GemvCase {
  DType dtype;
  int64_t k, n;
  GemvOp op;
};

class LinearCudaGemv : public ::testing::TestWithParam<GemvCase> {};

TEST_P(LinearCudaGemv, MatchesCpuAtEveryDecodeBatch) {
  const GemvCase c = GetParam();
  const DType t = c.dtype;
  const int64_t k = c.k, n = c.n;
  const bool gelu = c.op == GemvOp::gelu, accumulate = c.op == GemvOp::accumulate;
  // x has the most rows; each M takes its first M rows. y starts from random values in every
  // case, so an output the kernel skips shows as an error.
  const LinearInputs in({cuda::kGemvMaxRows, k, n}, t, 700);
  const Tensor y0 = round_through(random_normal({cuda::kGemvMaxRows, n}, 10), t);
  const Tensor w = to_device(gpu(), in.w, t), b_all = to_device(gpu(), in.b, t);
  for (int64_t m : {1, 2, 3, 5, 8})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(str_cat("M = ", m, bias ? ", bias" : ", no bias"));
      const Tensor x_host = in.x.slice(0, {m, k}), y0_rows = y0.slice(0, {m, n});
      Tensor y_ref = plus(y0_rows, Tensor::zeros(cpu(), DType::f32, {m, n}));
      if (gelu)
        linear_gelu_forward(cpu(), x_host, in.w, bias ? in.b : Tensor(), y_ref);
      else
        linear_forward(cpu(), x_host, in.w, bias ? in.b : Tensor(), y_ref, accumulate);

      const Tensor x = to_device(gpu(), x_host, t), b = bias ? b_all : Tensor();
      const auto through_linear = [&] {
        Tensor y = to_device(gpu(), y0_rows, t);
        if (gelu)
          linear_gelu_forward(gpu(), x, w, b, y);
        else
          linear_forward(gpu(), x, w, b, y, accumulate);
        return to_host_f32(gpu(), y);
      };
      const auto through_gemv = [&] {
        Tensor y = to_device(gpu(), y0_rows, t);
        cuda::gemv_forward(gpu(), x, w, b, y, accumulate, gelu);
        return to_host_f32(gpu(), y);
      };
      const Tensor y_probe = Tensor::empty(gpu(), t, {m, n});
      ASSERT_TRUE(cuda::gemv_supports(x, w, y_probe));
      EXPECT_EQ(cuda::gemv_applies(x, w, y_probe), cuda::decode_gemv_enabled() && m <= cuda::kGemvDispatchRows);
      const Tensor y_linear = through_linear(), y_gemv = through_gemv();
      EXPECT_LT(rel_error(y_linear, y_ref), kActivationTol);
      EXPECT_LT(rel_error(y_gemv, y_ref), kActivationTol);
      // A fixed summation order: the same bits on every run.
      EXPECT_EQ(max_abs_diff(through_gemv(), y_gemv), 0.0);
    }
}

std::vector<GemvCase> gemv_cases() {
  std::vector<GemvCase> cases;
  for (DType t : {DType::bf16, DType::f16}) {
    cases.push_back({t, 768, 2304, GemvOp::plain});       // qkv
    cases.push_back({t, 768, 3072, GemvOp::gelu});        // fc1 with its GELU
    cases.push_back({t, 3072, 768, GemvOp::accumulate});  // fc2 into the residual (K split over warps)
    cases.push_back({t, 768, 50257, GemvOp::plain});      // the LM head, odd N
    cases.push_back({t, 96, 1001, GemvOp::accumulate});   // odd N, K shorter than a warp's packs
    cases.push_back({t, 3072, 5, GemvOp::gelu});          // fewer columns than a block owns
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(DecodeShapes, LinearCudaGemv, ::testing::ValuesIn(gemv_cases()), [](const auto& info) {
  const GemvCase& c = info.param;
  const char* op = c.op == GemvOp::gelu ? "gelu" : c.op == GemvOp::accumulate ? "accumulate" : "plain";
  return str_cat(dtype_name(c.dtype), "_K", c.k, "_N", c.n, "_", op);
});

// TROUPE_DECODE_GEMV takes 0 or 1; anything else is an error that names it.
TEST(LinearCudaGemvFlag, OnlyZeroAndOneAreAccepted) {
  EXPECT_TRUE(cuda::decode_gemv_flag_from(nullptr));
  EXPECT_TRUE(cuda::decode_gemv_flag_from("1"));
  EXPECT_FALSE(cuda::decode_gemv_flag_from("0"));
  for (const char* bad : {"", "2", "yes", "off"}) {
    try {
      cuda::decode_gemv_flag_from(bad);
      ADD_FAILURE() << "TROUPE_DECODE_GEMV='" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TROUPE_DECODE_GEMV"), std::string::npos) << e.what();
    }
  }
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
