#include "kernels/dropout.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

// in -> out: same shape and dtype, on ctx's device; f32 on the CPU; 0 <= p < 1.
static void check_dropout_args(const Context& ctx, const char* op, const char* in_name, const Tensor& in,
                               const char* out_name, const Tensor& out, float p) {
  expect_device(op, in_name, ctx, in);
  if (!ctx.is_cuda()) expect_dtype(op, in_name, in, DType::f32);
  expect_device(op, out_name, ctx, out);
  expect_shape(op, out_name, out, in.shape());
  expect_dtype(op, out_name, out, in.dtype());
  TROUPE_CHECK(p >= 0.0f && p < 1.0f, op, ": p must be in [0, 1), got ", p);
}

void dropout_forward(const Context& ctx, const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t offset) {
  check_dropout_args(ctx, "dropout_forward", "x", x, "y", y, p);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::dropout_forward(ctx, x, y, p, seed, offset));
  else
    cpu::dropout_forward(x, y, p, seed, offset);
}

void dropout_backward(const Context& ctx, const Tensor& dy, const Tensor& dx, float p, uint64_t seed, uint64_t offset) {
  check_dropout_args(ctx, "dropout_backward", "dy", dy, "dx", dx, p);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::dropout_backward(ctx, dy, dx, p, seed, offset));
  else
    cpu::dropout_backward(dy, dx, p, seed, offset);
}

}  // namespace troupe
