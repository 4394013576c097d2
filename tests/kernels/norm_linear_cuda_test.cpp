// norm_linear_forward (kernels/norm_linear.hpp) on CUDA against the CPU backend's norm then
// linear, in bf16 and f16: the norm fused into the small-batch GEMV at every decode batch it
// takes (1 to 8 rows; LayerNorm with and without a bias, RMSNorm; with and without GELU), on
// GPT-2 124M's qkv, fc1 and LM head shapes, and the unfused path where the GEMV does not apply.
#include <tuple>

#include "kernels/norm_linear.hpp"
#include "tests/test_util.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/gemv.hpp"
#endif

namespace troupe::test {
namespace {

#if TROUPE_HAVE_CUDA  // gemv.hpp exists only in CUDA builds; without one this binary only skips

constexpr float kEps = 1e-5f;
// 16-bit outputs of a normalized input rounded to 16 bits: ~3 significant digits.
constexpr double kActivationTol = 1e-2;

enum class NormCase { layernorm, layernorm_no_bias, rmsnorm };

struct NormLinearCase {
  DType dtype;
  int64_t k, n;
  NormCase norm;
  bool gelu;
};

// Host f32 inputs rounded through the 16-bit type. x's rows have a nonzero mean and a scale
// other than 1, so centering and scaling both matter.
struct NormLinearInputs {
  Tensor x, norm_w, norm_b, w, b;
  NormLinearInputs(int64_t m, int64_t k, int64_t n, DType t, uint64_t seed)
      : x(random_normal({m, k}, seed, 3.0f)),
        norm_w(round_through(random_uniform({k}, seed + 1, 0.5f, 1.5f), t)),
        norm_b(round_through(random_normal({k}, seed + 2, 0.1f), t)),
        w(round_through(random_normal({n, k}, seed + 3, 0.05f), t)),
        b(round_through(random_normal({n}, seed + 4), t)) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t row = i / k;
      x.at(i) += 0.5f + 0.25f * float(row);  // row r: mean ~0.5 + r/4
    }
    x = round_through(x, t);
  }
};

NormWeights norm_weights(NormCase c, const Tensor& w, const Tensor& b) {
  switch (c) {
    case NormCase::layernorm:
      return {NormKind::layernorm, w, b, kEps};
    case NormCase::layernorm_no_bias:
      return {NormKind::layernorm, w, Tensor(), kEps};
    case NormCase::rmsnorm:
      return {NormKind::rmsnorm, w, Tensor(), kEps};
  }
  return {};
}

NormScratch scratch(const Context& ctx, DType t, int64_t m, int64_t k) {
  return {Tensor::empty(ctx, t, {m, k}), Tensor::empty(ctx, DType::f32, {m}), Tensor::empty(ctx, DType::f32, {m})};
}

// y = linear(norm(x)) on `ctx` in type t (the CPU: f32) from the host inputs' first m rows.
Tensor run_norm_linear(const Context& ctx, DType t, const NormLinearInputs& in, NormCase c, bool gelu, int64_t m,
                       bool bias) {
  const int64_t k = in.x.dim(1), n = in.w.dim(0);
  const auto dev = [&](const Tensor& h) { return ctx.is_cuda() ? to_device(ctx, h, t) : h; };
  Tensor y = Tensor::zeros(ctx, t, {m, n});
  norm_linear_forward(ctx, dev(in.x.slice(0, {m, k})), norm_weights(c, dev(in.norm_w), dev(in.norm_b)), dev(in.w),
                      bias ? dev(in.b) : Tensor(), y, gelu, scratch(ctx, t, m, k));
  return ctx.is_cuda() ? to_host_f32(ctx, y) : y;
}

// The same through the fused kernel itself, at any row count it takes (norm_linear_forward sends
// it only cuda::kGemvDispatchRows rows: the kernel must stay right beyond them).
Tensor run_fused_gemv(DType t, const NormLinearInputs& in, NormCase c, bool gelu, int64_t m, bool bias) {
  const int64_t k = in.x.dim(1), n = in.w.dim(0);
  const auto dev = [&](const Tensor& h) { return to_device(gpu(), h, t); };
  const NormWeights nw = norm_weights(c, dev(in.norm_w), dev(in.norm_b));
  Tensor y = Tensor::zeros(gpu(), t, {m, n});
  cuda::gemv_norm_forward(gpu(), dev(in.x.slice(0, {m, k})),
                          nw.kind == NormKind::layernorm ? cuda::GemvNorm::layernorm : cuda::GemvNorm::rmsnorm, nw.w,
                          nw.b, nw.eps, dev(in.w), bias ? dev(in.b) : Tensor(), y, gelu);
  return to_host_f32(gpu(), y);
}

class NormLinearCuda : public ::testing::TestWithParam<NormLinearCase> {};

TEST_P(NormLinearCuda, FusedGemvMatchesCpuAtEveryDecodeBatch) {
  const NormLinearCase p = GetParam();
  const NormLinearInputs in(cuda::kGemvMaxRows, p.k, p.n, p.dtype, 1000);
  for (int64_t m : {1, 2, 3, 5, 8})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(str_cat("M = ", m, bias ? ", bias" : ", no bias"));
      const Tensor y_ref = run_norm_linear(cpu(), DType::f32, in, p.norm, p.gelu, m, bias);
      const Tensor y = run_norm_linear(gpu(), p.dtype, in, p.norm, p.gelu, m, bias);
      EXPECT_LT(rel_error(y, y_ref), kActivationTol);
      // A fixed summation order: the same bits on every run.
      EXPECT_EQ(max_abs_diff(run_norm_linear(gpu(), p.dtype, in, p.norm, p.gelu, m, bias), y), 0.0);
      const Tensor fused = run_fused_gemv(p.dtype, in, p.norm, p.gelu, m, bias);
      EXPECT_LT(rel_error(fused, y_ref), kActivationTol);
      EXPECT_EQ(max_abs_diff(run_fused_gemv(p.dtype, in, p.norm, p.gelu, m, bias), fused), 0.0);
    }
}

std::vector<NormLinearCase> norm_linear_cases() {
  std::vector<NormLinearCase> cases;
  for (DType t : {DType::bf16, DType::f16}) {
    for (NormCase c : {NormCase::layernorm, NormCase::layernorm_no_bias, NormCase::rmsnorm}) {
      cases.push_back({t, 768, 2304, c, false});  // ln1 + qkv
      cases.push_back({t, 768, 3072, c, true});   // ln2 + fc1 + GELU
    }
    cases.push_back({t, 768, 50257, NormCase::layernorm, false});  // lnf + the LM head
    cases.push_back({t, 96, 1001, NormCase::rmsnorm, true});       // odd N, K shorter than a warp's packs
    cases.push_back({t, 3072, 5, NormCase::layernorm, false});     // K split over warps, few columns
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(DecodeShapes, NormLinearCuda, ::testing::ValuesIn(norm_linear_cases()), [](const auto& info) {
  const NormLinearCase& c = info.param;
  const char* norm = c.norm == NormCase::layernorm           ? "layernorm"
                     : c.norm == NormCase::layernorm_no_bias ? "layernorm_nobias"
                                                             : "rmsnorm";
  return str_cat(dtype_name(c.dtype), "_K", c.k, "_N", c.n, "_", norm, c.gelu ? "_gelu" : "");
});

// Where the fused kernel does not apply (more than 8 rows; K % 8 != 0 is refused by the CUDA norm
// itself), the norm runs into the scratch and the linear after it: still right.
TEST(NormLinearCudaFallback, UnfusedShapesMatchCpu) {
  for (const auto& [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{9, 64, 50}, {37, 768, 2304}})
    for (bool gelu : {false, true}) {
      SCOPED_TRACE(str_cat("M = ", m, ", K = ", k, gelu ? ", gelu" : ""));
      const NormLinearInputs in(m, k, n, DType::bf16, 1100);
      EXPECT_FALSE(cuda::gemv_norm_supports(
          to_device(gpu(), in.x, DType::bf16), to_device(gpu(), in.norm_w, DType::bf16), Tensor(),
          to_device(gpu(), in.w, DType::bf16), Tensor::empty(gpu(), DType::bf16, {m, n})));
      const Tensor y_ref = run_norm_linear(cpu(), DType::f32, in, NormCase::layernorm, gelu, m, true);
      const Tensor y = run_norm_linear(gpu(), DType::bf16, in, NormCase::layernorm, gelu, m, true);
      EXPECT_LT(rel_error(y, y_ref), kActivationTol);
    }
}

TEST(NormLinearCudaArgs, RmsNormWithABiasIsAnError) {
  const NormLinearInputs in(1, 64, 16, DType::bf16, 1200);
  const auto dev = [](const Tensor& h) { return to_device(gpu(), h, DType::bf16); };
  Tensor y = Tensor::empty(gpu(), DType::bf16, {1, 16});
  EXPECT_THROW(norm_linear_forward(gpu(), dev(in.x), {NormKind::rmsnorm, dev(in.norm_w), dev(in.norm_b), kEps},
                                   dev(in.w), Tensor(), y, false, scratch(gpu(), DType::bf16, 1, 64)),
               Error);
  // A norm weight of the wrong length is refused by name, on the fused path too.
  EXPECT_THROW(
      norm_linear_forward(gpu(), dev(in.x), {NormKind::layernorm, dev(in.norm_w.slice(0, {56})), Tensor(), kEps},
                          dev(in.w), Tensor(), y, false, scratch(gpu(), DType::bf16, 1, 64)),
      Error);
}

#endif

}  // namespace
}  // namespace troupe::test
