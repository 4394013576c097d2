#include "kernels/fp8.hpp"

#include <utility>

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// x: f32 on the CPU; bf16, f16 or f32 on CUDA.
void expect_high_precision(const Context& ctx, const char* op, const char* arg, const Tensor& t) {
  expect_device(op, arg, ctx, t);
  if (ctx.is_cuda())
    TROUPE_CHECK(is_float(t.dtype()), op, ": argument '", arg, "' must be bf16, f16 or f32 on CUDA, got ", t.str());
  else
    expect_dtype(op, arg, t, DType::f32);
}

// A per-tensor scale: f32 [1] on ctx's device.
void expect_scalar(const Context& ctx, const char* op, const char* arg, const Tensor& t) {
  expect_device(op, arg, ctx, t);
  expect_dtype(op, arg, t, DType::f32);
  expect_shape(op, arg, t, {1});
}

void expect_fp8_bytes(const Context& ctx, const char* op, const char* arg, const Tensor& t, int64_t numel) {
  expect_device(op, arg, ctx, t);
  expect_dtype(op, arg, t, DType::u8);
  TROUPE_CHECK(t.numel() == numel, op, ": argument '", arg, "' must have ", numel, " elements, got ", t.str());
}

}  // namespace

void fp8_cast(const Context& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q,
              const Tensor& amax) {
  constexpr const char* op = "fp8_cast";
  expect_high_precision(ctx, op, "x", x);
  expect_scalar(ctx, op, "scale", scale);
  expect_fp8_bytes(ctx, op, "q", q, x.numel());
  if (amax.defined()) expect_scalar(ctx, op, "amax", amax);
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::fp8_cast(ctx, x, scale, f, q, amax));
    return;
  }
  if (amax.defined()) cpu::fp8_amax(x, amax);
  cpu::fp8_cast(x, scale, f, q);
}

void fp8_dequantize(const Context& ctx, const Tensor& q, Fp8Format f, const Tensor& scale_inv, const Tensor& y) {
  constexpr const char* op = "fp8_dequantize";
  expect_high_precision(ctx, op, "y", y);
  expect_scalar(ctx, op, "scale_inv", scale_inv);
  expect_fp8_bytes(ctx, op, "q", q, y.numel());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::fp8_dequantize(ctx, q, f, scale_inv, y));
  else
    cpu::fp8_dequantize(q, f, scale_inv, y);
}

void fp8_amax(const Context& ctx, const Tensor& x, const Tensor& amax) {
  constexpr const char* op = "fp8_amax";
  expect_high_precision(ctx, op, "x", x);
  expect_scalar(ctx, op, "amax", amax);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::fp8_amax(ctx, x, amax));
  else
    cpu::fp8_amax(x, amax);
}

void fp8_transpose(const Context& ctx, const Tensor& q, const Tensor& qt) {
  constexpr const char* op = "fp8_transpose";
  TROUPE_CHECK(q.ndim() == 2, op, ": argument 'q' must be [R, C], got ", q.str());
  expect_fp8_bytes(ctx, op, "q", q, q.numel());
  expect_fp8_bytes(ctx, op, "qt", qt, q.numel());
  expect_shape(op, "qt", qt, {q.dim(1), q.dim(0)});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::fp8_transpose(ctx, q, qt));
  else
    cpu::fp8_transpose(q, qt);
}

void fp8_cast_transpose(const Context& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q,
                        const Tensor& qt, const Tensor& amax) {
  constexpr const char* op = "fp8_cast_transpose";
  TROUPE_CHECK(x.ndim() == 2, op, ": argument 'x' must be [R, C], got ", x.str());
  expect_high_precision(ctx, op, "x", x);
  expect_scalar(ctx, op, "scale", scale);
  expect_fp8_bytes(ctx, op, "qt", qt, x.numel());
  expect_shape(op, "qt", qt, {x.dim(1), x.dim(0)});
  if (q.defined()) {
    expect_fp8_bytes(ctx, op, "q", q, x.numel());
    expect_shape(op, "q", q, x.shape());
  }
  if (amax.defined()) expect_scalar(ctx, op, "amax", amax);
  if (ctx.is_cuda()) {
    bool fused = false;
    TROUPE_ON_CUDA(fused = cuda::fp8_cast_transpose_fused(ctx, x, scale, f, q, qt, amax));
    if (fused) return;
  }
  const Tensor cast = q.defined() ? q : Tensor::empty(ctx, DType::u8, x.shape());
  fp8_cast(ctx, x, scale, f, cast, amax);
  fp8_transpose(ctx, cast, qt);
}

void expect_fp8_side_output(const Context& ctx, const char* op, const Fp8SideOutput& out, const Tensor& y) {
  if (out.q.defined()) {
    expect_fp8_bytes(ctx, op, "fp8.q", out.q, y.numel());
    expect_shape(op, "fp8.q", out.q, y.shape());
    expect_scalar(ctx, op, "fp8.scale", out.scale);
  }
  if (out.amax.defined()) expect_scalar(ctx, op, "fp8.amax", out.amax);
}

void fp8_side_output(const Context& ctx, const Tensor& y, const Fp8SideOutput& out) {
  if (out.q.defined())
    fp8_cast(ctx, y, out.scale, Fp8Format::e4m3, out.q, out.amax);
  else if (out.amax.defined())
    fp8_amax(ctx, y, out.amax);
}

void fp8_scales_update(const Context& ctx, const Tensor& amax_history, const Tensor& scale, const Tensor& scale_inv,
                       const Fp8ScalingParams& params) {
  constexpr const char* op = "fp8_scales_update";
  TROUPE_CHECK(amax_history.ndim() == 2 && amax_history.dim(0) >= 1, op,
               ": argument 'amax_history' must be [L, T] with L >= 1, got ", amax_history.str());
  const int64_t count = amax_history.dim(1);
  for (auto [arg, t] : {std::pair<const char*, const Tensor*>{"amax_history", &amax_history},
                        {"scale", &scale},
                        {"scale_inv", &scale_inv}}) {
    expect_device(op, arg, ctx, *t);
    expect_dtype(op, arg, *t, DType::f32);
  }
  expect_shape(op, "scale", scale, {count});
  TROUPE_CHECK((scale_inv.ndim() == 1 && scale_inv.dim(0) == count) ||
                   (scale_inv.ndim() == 2 && scale_inv.dim(0) == count && scale_inv.dim(1) >= 1),
               op, ": argument 'scale_inv' must be [", count, "] or [", count, ", r], got ", scale_inv.str());
  TROUPE_CHECK(params.fp8_max > 0.0f, op, ": fp8_max must be positive");
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::fp8_scales_update(ctx, amax_history, scale, scale_inv, params));
  else
    cpu::fp8_scales_update(amax_history, scale, scale_inv, params);
}

}  // namespace troupe
