#include "kernels/norm_linear.hpp"

#include "base/check.hpp"
#include "kernels/linear.hpp"
#include "kernels/norm.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/gemv.hpp"
#endif

namespace troupe {

namespace {

// The fused kernel's arguments, checked as layernorm_forward and linear_forward check theirs.
void expect_fused_args(const Context& ctx, const Tensor& x, const NormWeights& norm, const Tensor& w, const Tensor& b,
                       const Tensor& y) {
  constexpr const char* op = "norm_linear_forward";
  const int64_t m = x.dim(0), k = x.dim(1);
  const auto expect_like_x = [&](const char* arg, const Tensor& t, const Shape& shape) {
    expect_device(op, arg, ctx, t);
    expect_dtype(op, arg, t, x.dtype());
    expect_shape(op, arg, t, shape);
  };
  expect_device(op, "x", ctx, x);
  expect_like_x("norm.w", norm.w, {k});
  if (norm.b.defined()) expect_like_x("norm.b", norm.b, {k});
  TROUPE_CHECK(w.ndim() == 2, op, ": argument 'w' must be [N, K] with K = ", k, ", got ", w.str());
  const int64_t n = w.dim(0);
  expect_like_x("w", w, {n, k});
  if (b.defined()) expect_like_x("b", b, {n});
  expect_like_x("y", y, {m, n});
}

}  // namespace

void norm_linear_forward(const Context& ctx, const Tensor& x, const NormWeights& norm, const Tensor& w, const Tensor& b,
                         const Tensor& y, bool gelu, const NormScratch& scratch) {
  TROUPE_CHECK(x.ndim() == 2, "norm_linear_forward: argument 'x' must be [M, K], got ", x.str());
  TROUPE_CHECK(norm.kind == NormKind::layernorm || !norm.b.defined(),
               "norm_linear_forward: RMSNorm takes no bias, got norm.b ", norm.b.str());
#if TROUPE_HAVE_CUDA
  if (ctx.is_cuda() && w.ndim() == 2 && cuda::gemv_applies(x, w, y) &&
      cuda::gemv_norm_supports(x, norm.w, norm.b, w, y)) {
    expect_fused_args(ctx, x, norm, w, b, y);
    cuda::gemv_norm_forward(ctx, x,
                            norm.kind == NormKind::layernorm ? cuda::GemvNorm::layernorm : cuda::GemvNorm::rmsnorm,
                            norm.w, norm.b, norm.eps, w, b, y, gelu);
    return;
  }
#endif
  if (norm.kind == NormKind::layernorm)
    layernorm_forward(ctx, x, norm.w, norm.b, norm.eps, scratch.ln, scratch.mean, scratch.rstd);
  else
    rmsnorm_forward(ctx, x, norm.w, norm.eps, scratch.ln, scratch.rstd);
  if (gelu)
    linear_gelu_forward(ctx, scratch.ln, w, b, y);
  else
    linear_forward(ctx, scratch.ln, w, b, y);
}

}  // namespace troupe
