#include "kernels/linear.hpp"

#include "kernels/activation.hpp"
#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// x, w, b, y, dy, dx: f32 on the CPU; one type (bf16, f16, or f32 for inference's exact path) on CUDA.
void expect_activation_dtype(const Context& ctx, const char* op, const char* arg, const Tensor& t, DType want) {
  expect_device(op, arg, ctx, t);
  if (!ctx.is_cuda()) {
    expect_dtype(op, arg, t, DType::f32);
    return;
  }
  TROUPE_CHECK(is_float(t.dtype()), op, ": argument '", arg, "' must be bf16, f16 or f32 on CUDA, got ", t.str());
  expect_dtype(op, arg, t, want);
}

struct LinearDims {
  int64_t m, k, n;
};

// Checks x [M, K] and w [N, K] and returns M, K, N.
LinearDims expect_input_and_weight(const Context& ctx, const char* op, const Tensor& x, const Tensor& w) {
  expect_activation_dtype(ctx, op, "x", x, x.dtype());
  TROUPE_CHECK(x.ndim() == 2, op, ": argument 'x' must be [M, K], got ", x.str());
  TROUPE_CHECK(w.ndim() == 2 && w.dim(1) == x.dim(1), op, ": argument 'w' must be [N, K] with K = ", x.dim(1), ", got ",
               w.str());
  expect_activation_dtype(ctx, op, "w", w, x.dtype());
  return {x.dim(0), x.dim(1), w.dim(0)};
}

// Checks a forward's x, w, b (optional) and y.
void expect_forward_args(const Context& ctx, const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                         const Tensor& y) {
  const auto [m, k, n] = expect_input_and_weight(ctx, op, x, w);
  if (b.defined()) {
    expect_activation_dtype(ctx, op, "b", b, x.dtype());
    expect_shape(op, "b", b, {n});
  }
  expect_activation_dtype(ctx, op, "y", y, x.dtype());
  expect_shape(op, "y", y, {m, n});
}

}  // namespace

void linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                    bool accumulate) {
  expect_forward_args(ctx, "linear_forward", x, w, b, y);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::linear_forward(ctx, x, w, b, y, accumulate));
  else
    cpu::linear_forward(x, w, b, y, accumulate);
}

void linear_gelu_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  expect_forward_args(ctx, "linear_gelu_forward", x, w, b, y);
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::linear_gelu_forward(ctx, x, w, b, y));
  } else {
    cpu::linear_forward(x, w, b, y, false);
    gelu_forward(ctx, y, y);
  }
}

void linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                     const Tensor& dw, const Tensor& db, bool accumulate_dx) {
  constexpr const char* op = "linear_backward";
  const auto [m, k, n] = expect_input_and_weight(ctx, op, x, w);
  expect_activation_dtype(ctx, op, "dy", dy, x.dtype());
  expect_shape(op, "dy", dy, {m, n});
  if (dx.defined()) {
    expect_activation_dtype(ctx, op, "dx", dx, x.dtype());
    expect_shape(op, "dx", dx, {m, k});
  }
  // Parameter gradients are f32 on every backend.
  if (dw.defined()) {
    expect_device(op, "dw", ctx, dw);
    expect_dtype(op, "dw", dw, DType::f32);
    expect_shape(op, "dw", dw, {n, k});
  }
  if (db.defined()) {
    expect_device(op, "db", ctx, db);
    expect_dtype(op, "db", db, DType::f32);
    expect_shape(op, "db", db, {n});
  }
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::linear_backward(ctx, dy, x, w, dx, dw, db, accumulate_dx));
  else
    cpu::linear_backward(dy, x, w, dx, dw, db, accumulate_dx);
}

}  // namespace troupe
