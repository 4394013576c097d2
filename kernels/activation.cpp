#include "kernels/activation.hpp"

#include "kernels/dispatch.hpp"
#include "kernels/linear.hpp"

namespace troupe {

static void expect_float_input(const Context& ctx, const char* op, const char* arg, const Tensor& t) {
  expect_device(op, arg, ctx, t);
  if (!ctx.is_cuda()) expect_dtype(op, arg, t, DType::f32);
}

void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Fp8SideOutput& fp8) {
  constexpr const char* op = "gelu_forward";
  expect_float_input(ctx, op, "x", x);
  expect_device(op, "y", ctx, y);
  expect_shape(op, "y", y, x.shape());
  expect_dtype(op, "y", y, x.dtype());
  expect_fp8_side_output(ctx, op, fp8, y);
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::gelu_forward(ctx, x, y, fp8));
    return;
  }
  cpu::gelu_forward(x, y);
  fp8_side_output(ctx, y, fp8);
}

void gelu_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  constexpr const char* op = "gelu_backward";
  expect_float_input(ctx, op, "x", x);
  for (auto [name, t] : {std::pair{"dy", &dy}, std::pair{"dx", &dx}}) {
    expect_device(op, name, ctx, *t);
    expect_shape(op, name, *t, x.shape());
    expect_dtype(op, name, *t, x.dtype());
  }
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::gelu_backward(ctx, dy, x, dx));
  else
    cpu::gelu_backward(dy, x, dx);
}

void gelu_backward_bias_grad(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx,
                             const Tensor& db) {
  constexpr const char* op = "gelu_backward_bias_grad";
  expect_float_input(ctx, op, "x", x);
  TROUPE_CHECK(x.ndim() == 2, op, ": x must be [rows, cols], got ", x.str());
  for (auto [name, t] : {std::pair{"dy", &dy}, std::pair{"dx", &dx}}) {
    expect_device(op, name, ctx, *t);
    expect_shape(op, name, *t, x.shape());
    expect_dtype(op, name, *t, x.dtype());
  }
  expect_device(op, "db", ctx, db);
  expect_shape(op, "db", db, {x.dim(1)});
  expect_dtype(op, "db", db, DType::f32);
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::gelu_backward_bias_grad(ctx, dy, x, dx, db));
    return;
  }
  cpu::gelu_backward(dy, x, dx);
  cpu::bias_grad_accumulate(dx, db);
}

void swiglu_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  constexpr const char* op = "swiglu_forward";
  expect_float_input(ctx, op, "x", x);
  TROUPE_CHECK(x.ndim() == 2 && x.dim(1) % 2 == 0, op, ": x must be [N, 2F], got ", x.str());
  expect_device(op, "y", ctx, y);
  expect_shape(op, "y", y, {x.dim(0), x.dim(1) / 2});
  expect_dtype(op, "y", y, x.dtype());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::swiglu_forward(ctx, x, y));
  else
    cpu::swiglu_forward(x, y);
}

void swiglu_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  constexpr const char* op = "swiglu_backward";
  expect_float_input(ctx, op, "x", x);
  TROUPE_CHECK(x.ndim() == 2 && x.dim(1) % 2 == 0, op, ": x must be [N, 2F], got ", x.str());
  expect_device(op, "dy", ctx, dy);
  expect_shape(op, "dy", dy, {x.dim(0), x.dim(1) / 2});
  expect_dtype(op, "dy", dy, x.dtype());
  expect_device(op, "dx", ctx, dx);
  expect_shape(op, "dx", dx, x.shape());
  expect_dtype(op, "dx", dx, x.dtype());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::swiglu_backward(ctx, dy, x, dx));
  else
    cpu::swiglu_backward(dy, x, dx);
}

}  // namespace troupe
