#include "kernels/elementwise.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// A floating tensor on ctx's device; f32 on the CPU (the reference backend computes in f32).
void expect_float_operand(const Context& ctx, const char* op, const char* arg, const Tensor& t) {
  expect_device(op, arg, ctx, t);
  if (ctx.is_cuda()) {
    TROUPE_CHECK(is_float(t.dtype()), op, ": argument '", arg, "' must be f32, bf16 or f16, got ", t.str());
  } else {
    expect_dtype(op, arg, t, DType::f32);
  }
}

}  // namespace

void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr const char* op = "add";
  expect_float_operand(ctx, op, "a", a);
  for (auto [name, t] : {std::pair{"b", &b}, std::pair{"out", &out}}) {
    expect_device(op, name, ctx, *t);
    expect_shape(op, name, *t, a.shape());
    expect_dtype(op, name, *t, a.dtype());
  }
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::add(ctx, a, b, out));
  else
    cpu::add(a, b, out);
}

void scale_inplace(const Context& ctx, const Tensor& x, float s) {
  expect_float_operand(ctx, "scale_inplace", "x", x);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::scale_inplace(ctx, x, s));
  else
    cpu::scale_inplace(x, s);
}

// Any pair of f32 / bf16 / f16 on either backend: host bf16/f16 tensors are how data
// enters and leaves the CPU reference.
void convert(const Context& ctx, const Tensor& src, const Tensor& dst) {
  constexpr const char* op = "convert";
  for (auto [name, t] : {std::pair{"src", &src}, std::pair{"dst", &dst}}) {
    expect_device(op, name, ctx, *t);
    TROUPE_CHECK(is_float(t->dtype()), op, ": argument '", name, "' must be f32, bf16 or f16, got ", t->str());
  }
  TROUPE_CHECK(src.numel() == dst.numel(), op, ": src ", src.str(), " and dst ", dst.str(), " differ in element count");
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::convert(ctx, src, dst));
  else
    cpu::convert(src, dst);
}

}  // namespace troupe
