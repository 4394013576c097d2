#include "kernels/moe_shared_gate.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// x [N, C] (f32 on the CPU, one float type on CUDA), the other [N, C] rows of its type, gate_w
// [1, C] of its type, gate f32 [N, 1].
void expect_gate_args(const Context& ctx, const char* op, const Tensor& x, const Tensor& gate_w, const Tensor& gate,
                      std::initializer_list<std::pair<const char*, const Tensor*>> rows) {
  expect_device(op, "x", ctx, x);
  TROUPE_CHECK(x.ndim() == 2 && is_float(x.dtype()), op, ": x must be floating point [N, C], got ", x.str());
  if (!ctx.is_cuda()) expect_dtype(op, "x", x, DType::f32);
  expect_device(op, "gate_w", ctx, gate_w);
  expect_dtype(op, "gate_w", gate_w, x.dtype());
  expect_shape(op, "gate_w", gate_w, {1, x.dim(1)});
  expect_device(op, "gate", ctx, gate);
  expect_dtype(op, "gate", gate, DType::f32);
  expect_shape(op, "gate", gate, {x.dim(0), 1});
  for (auto [name, t] : rows) {
    expect_device(op, name, ctx, *t);
    expect_dtype(op, name, *t, x.dtype());
    expect_shape(op, name, *t, x.shape());
  }
}

}  // namespace

void moe_shared_gate_forward(const Context& ctx, const Tensor& x, const Tensor& gate_w, const Tensor& out,
                             const Tensor& gate, const Tensor& y) {
  expect_gate_args(ctx, "moe_shared_gate_forward", x, gate_w, gate, {{"out", &out}, {"y", &y}});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_shared_gate_forward(ctx, x, gate_w, out, gate, y));
  else
    cpu::moe_shared_gate_forward(x, gate_w, out, gate, y);
}

void moe_shared_gate_backward(const Context& ctx, const Tensor& x, const Tensor& gate_w, const Tensor& gate,
                              const Tensor& out, const Tensor& dy, const Tensor& dout, const Tensor& dx,
                              const Tensor& dgate_w) {
  constexpr const char* op = "moe_shared_gate_backward";
  expect_gate_args(ctx, op, x, gate_w, gate, {{"out", &out}, {"dy", &dy}, {"dout", &dout}, {"dx", &dx}});
  expect_device(op, "dgate_w", ctx, dgate_w);
  expect_dtype(op, "dgate_w", dgate_w, DType::f32);
  expect_shape(op, "dgate_w", dgate_w, gate_w.shape());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_shared_gate_backward(ctx, x, gate_w, gate, out, dy, dout, dx, dgate_w));
  else
    cpu::moe_shared_gate_backward(x, gate_w, gate, out, dy, dout, dx, dgate_w);
}

}  // namespace troupe
