#include "kernels/linear_fused.hpp"

#include "kernels/activation.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/linear.hpp"

namespace troupe {

namespace {

void expect_same(const char* op, const char* arg, const Tensor& t, const Tensor& like) {
  expect_shape(op, arg, t, like.shape());
  expect_dtype(op, arg, t, like.dtype());
}

// Where cuBLASLt's GELU epilogues run: a 16-bit GELU input whose width is a multiple of 8 (its
// aux leading dimension).
bool gelu_epilogue_fits(const Tensor& pre) {
  return pre.ndim() == 2 && pre.dim(1) % 8 == 0 && (pre.dtype() == DType::bf16 || pre.dtype() == DType::f16);
}

}  // namespace

void linear_gelu_aux_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                             const Tensor& y) {
  expect_same("linear_gelu_aux_forward", "y", y, pre);
  if (ctx.is_cuda() && gelu_epilogue_fits(pre)) {  // matmul_lt checks the shapes and types
    TROUPE_ON_CUDA(cuda::linear_gelu_aux_forward(ctx, x, w, b, pre, y));
    return;
  }
  linear_forward(ctx, x, w, b, pre);
  gelu_forward(ctx, pre, y);
}

void linear_input_grad_dgelu(const Context& ctx, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dpre, const Tensor& db) {
  constexpr const char* op = "linear_input_grad_dgelu";
  expect_same(op, "dpre", dpre, pre);
  if (db.defined()) {
    expect_device(op, "db", ctx, db);
    expect_shape(op, "db", db, {pre.dim(1)});
    expect_dtype(op, "db", db, DType::f32);
  }
  if (ctx.is_cuda() && gelu_epilogue_fits(pre)) {
    TROUPE_ON_CUDA(cuda::linear_input_grad_dgelu(ctx, dy, w, pre, dpre, db));
    return;
  }
  linear_backward(ctx, dy, pre, w, dpre, Tensor(), Tensor());  // dpre = dy w (pre only gives the shapes)
  if (db.defined())
    gelu_backward_bias_grad(ctx, dpre, pre, dpre, db);
  else
    gelu_backward(ctx, dpre, pre, dpre);
}

void linear_residual_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& residual, const Tensor& y) {
  expect_same("linear_residual_forward", "residual", residual, y);
  TROUPE_CHECK(residual.data() != y.data(), "linear_residual_forward: residual and y must be apart");
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::linear_residual_forward(ctx, x, w, b, residual, y));
    return;
  }
  linear_forward(ctx, x, w, b, y);
  add(ctx, residual, y, y);
}

}  // namespace troupe
