#include "kernels/norm.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// x must be [N, C] (views of [B, T, C] are the caller's business); on the CPU it is f32.
void expect_rows(const Context& ctx, const char* op, const Tensor& x) {
  expect_device(op, "x", ctx, x);
  TROUPE_CHECK(x.ndim() == 2 && x.dim(1) > 0, op, ": x must be [N, C] with C > 0, got ", x.str());
  if (!ctx.is_cuda()) expect_dtype(op, "x", x, DType::f32);
}

// On ctx's device, with this shape and dtype.
void expect_like(const Context& ctx, const char* op, const char* arg, const Tensor& t, const Shape& shape,
                 DType dtype) {
  expect_device(op, arg, ctx, t);
  expect_shape(op, arg, t, shape);
  expect_dtype(op, arg, t, dtype);
}

void expect_f32(const Context& ctx, const char* op, const char* arg, const Tensor& t, const Shape& shape) {
  expect_like(ctx, op, arg, t, shape, DType::f32);
}

// x [N, W] holds `heads` of D values somewhere in each row (W need not be a multiple of D).
void expect_heads(const Context& ctx, const char* op, const char* arg, const Tensor& x, int64_t n, int64_t d,
                  HeadSpan heads, DType dtype) {
  expect_device(op, arg, ctx, x);
  expect_dtype(op, arg, x, dtype);
  TROUPE_CHECK(x.ndim() == 2 && x.dim(0) == n && (heads.first + heads.count) * d <= x.dim(1), op, ": '", arg,
               "' must be [", n, ", W] holding heads [", heads.first, ", ", heads.first + heads.count, ") of ", d,
               " values, got ", x.str());
}

// The head norms' shared checks: x's rows, the span, w [D], rstd [N, count].
void expect_head_norm(const Context& ctx, const char* op, const Tensor& x, const Tensor& w, HeadSpan heads,
                      const Tensor& rstd) {
  expect_device(op, "x", ctx, x);
  TROUPE_CHECK(x.ndim() == 2, op, ": x must be [N, W], got ", x.str());
  if (!ctx.is_cuda()) expect_dtype(op, "x", x, DType::f32);
  TROUPE_CHECK(heads.first >= 0 && heads.count > 0, op, ": heads [", heads.first, ", +", heads.count,
               ") must be a non-empty range of heads");
  TROUPE_CHECK(w.ndim() == 1 && w.dim(0) > 0, op, ": argument 'w' must be [D] with D > 0, got ", w.str());
  expect_like(ctx, op, "w", w, w.shape(), x.dtype());
  expect_heads(ctx, op, "x", x, x.dim(0), w.dim(0), heads, x.dtype());
  expect_f32(ctx, op, "rstd", rstd, {x.dim(0), heads.count});
}

// The residual gradient a norm's backward adds to: dx_in [N, C] like dx, or dx itself (in place).
const Tensor& residual_gradient(const Context& ctx, const char* op, const Tensor& dx_in, const Tensor& dx) {
  if (!dx_in.defined()) return dx;
  expect_like(ctx, op, "dx_in", dx_in, dx.shape(), dx.dtype());
  return dx_in;
}

}  // namespace

void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd, const Fp8SideOutput& fp8) {
  constexpr const char* op = "layernorm_forward";
  expect_rows(ctx, op, x);
  const int64_t n = x.dim(0), c = x.dim(1);
  expect_like(ctx, op, "w", w, {c}, x.dtype());
  if (b.defined()) expect_like(ctx, op, "b", b, {c}, x.dtype());
  expect_like(ctx, op, "y", y, x.shape(), x.dtype());
  expect_f32(ctx, op, "mean", mean, {n});
  expect_f32(ctx, op, "rstd", rstd, {n});
  TROUPE_CHECK(eps >= 0.0f, op, ": eps must be >= 0, got ", eps);
  expect_fp8_side_output(ctx, op, fp8, y);
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::layernorm_forward(ctx, x, w, b, eps, y, mean, rstd, fp8));
    return;
  }
  cpu::layernorm_forward(x, w, b, eps, y, mean, rstd);
  fp8_side_output(ctx, y, fp8);
}

void layernorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dx_in) {
  constexpr const char* op = "layernorm_backward";
  expect_rows(ctx, op, x);
  const int64_t n = x.dim(0), c = x.dim(1);
  expect_like(ctx, op, "dy", dy, x.shape(), x.dtype());
  expect_like(ctx, op, "w", w, {c}, x.dtype());
  expect_f32(ctx, op, "mean", mean, {n});
  expect_f32(ctx, op, "rstd", rstd, {n});
  expect_like(ctx, op, "dx", dx, x.shape(), x.dtype());
  expect_f32(ctx, op, "dw", dw, {c});
  if (db.defined()) expect_f32(ctx, op, "db", db, {c});  // undefined: the layer has no bias
  const Tensor& in = residual_gradient(ctx, op, dx_in, dx);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::layernorm_backward(ctx, dy, x, w, mean, rstd, dx, dw, db, in));
  else
    cpu::layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, in);
}

void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd, const Fp8SideOutput& fp8) {
  constexpr const char* op = "rmsnorm_forward";
  expect_rows(ctx, op, x);
  const int64_t n = x.dim(0), c = x.dim(1);
  expect_like(ctx, op, "w", w, {c}, x.dtype());
  expect_like(ctx, op, "y", y, x.shape(), x.dtype());
  expect_f32(ctx, op, "rstd", rstd, {n});
  TROUPE_CHECK(eps >= 0.0f, op, ": eps must be >= 0, got ", eps);
  expect_fp8_side_output(ctx, op, fp8, y);
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::rmsnorm_forward(ctx, x, w, eps, y, rstd, fp8));
    return;
  }
  cpu::rmsnorm_forward(x, w, eps, y, rstd);
  fp8_side_output(ctx, y, fp8);
}

void rmsnorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw, const Tensor& dx_in) {
  constexpr const char* op = "rmsnorm_backward";
  expect_rows(ctx, op, x);
  const int64_t n = x.dim(0), c = x.dim(1);
  expect_like(ctx, op, "dy", dy, x.shape(), x.dtype());
  expect_like(ctx, op, "w", w, {c}, x.dtype());
  expect_f32(ctx, op, "rstd", rstd, {n});
  expect_like(ctx, op, "dx", dx, x.shape(), x.dtype());
  expect_f32(ctx, op, "dw", dw, {c});
  const Tensor& in = residual_gradient(ctx, op, dx_in, dx);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::rmsnorm_backward(ctx, dy, x, w, rstd, dx, dw, in));
  else
    cpu::rmsnorm_backward(dy, x, w, rstd, dx, dw, in);
}

void rmsnorm_heads_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, HeadSpan heads,
                           const Tensor& y, const Tensor& rstd) {
  constexpr const char* op = "rmsnorm_heads_forward";
  expect_head_norm(ctx, op, x, w, heads, rstd);
  expect_heads(ctx, op, "y", y, x.dim(0), w.dim(0), heads, x.dtype());
  TROUPE_CHECK(eps >= 0.0f, op, ": eps must be >= 0, got ", eps);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::rmsnorm_heads_forward(ctx, x, w, eps, heads, y, rstd));
  else
    cpu::rmsnorm_heads_forward(x, w, eps, heads, y, rstd);
}

void rmsnorm_heads_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                            HeadSpan heads, const Tensor& dx, const Tensor& dw) {
  constexpr const char* op = "rmsnorm_heads_backward";
  expect_head_norm(ctx, op, x, w, heads, rstd);
  expect_heads(ctx, op, "dy", dy, x.dim(0), w.dim(0), heads, x.dtype());
  expect_like(ctx, op, "dx", dx, dy.shape(), x.dtype());
  expect_f32(ctx, op, "dw", dw, {w.dim(0)});
  TROUPE_CHECK(dx.data() != x.data(), op, ": dx must not be x (backward reads x after writing dx)");
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::rmsnorm_heads_backward(ctx, dy, x, w, rstd, heads, dx, dw));
  else
    cpu::rmsnorm_heads_backward(dy, x, w, rstd, heads, dx, dw);
}

}  // namespace troupe
