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

}  // namespace

void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  constexpr const char* op = "layernorm_forward";
  expect_rows(ctx, op, x);
  const int64_t n = x.dim(0), c = x.dim(1);
  expect_like(ctx, op, "w", w, {c}, x.dtype());
  if (b.defined()) expect_like(ctx, op, "b", b, {c}, x.dtype());
  expect_like(ctx, op, "y", y, x.shape(), x.dtype());
  expect_f32(ctx, op, "mean", mean, {n});
  expect_f32(ctx, op, "rstd", rstd, {n});
  TROUPE_CHECK(eps >= 0.0f, op, ": eps must be >= 0, got ", eps);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::layernorm_forward(ctx, x, w, b, eps, y, mean, rstd));
  else
    cpu::layernorm_forward(x, w, b, eps, y, mean, rstd);
}

void layernorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db) {
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
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::layernorm_backward(ctx, dy, x, w, mean, rstd, dx, dw, db));
  else
    cpu::layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
}

void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd) {
  constexpr const char* op = "rmsnorm_forward";
  expect_rows(ctx, op, x);
  const int64_t n = x.dim(0), c = x.dim(1);
  expect_like(ctx, op, "w", w, {c}, x.dtype());
  expect_like(ctx, op, "y", y, x.shape(), x.dtype());
  expect_f32(ctx, op, "rstd", rstd, {n});
  TROUPE_CHECK(eps >= 0.0f, op, ": eps must be >= 0, got ", eps);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::rmsnorm_forward(ctx, x, w, eps, y, rstd));
  else
    cpu::rmsnorm_forward(x, w, eps, y, rstd);
}

void rmsnorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw) {
  constexpr const char* op = "rmsnorm_backward";
  expect_rows(ctx, op, x);
  const int64_t n = x.dim(0), c = x.dim(1);
  expect_like(ctx, op, "dy", dy, x.shape(), x.dtype());
  expect_like(ctx, op, "w", w, {c}, x.dtype());
  expect_f32(ctx, op, "rstd", rstd, {n});
  expect_like(ctx, op, "dx", dx, x.shape(), x.dtype());
  expect_f32(ctx, op, "dw", dw, {c});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::rmsnorm_backward(ctx, dy, x, w, rstd, dx, dw));
  else
    cpu::rmsnorm_backward(dy, x, w, rstd, dx, dw);
}

}  // namespace troupe
