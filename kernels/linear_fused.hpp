// Training's GEMM fusions (kernels/linear.hpp's layer with its neighbour folded in): the GELU
// into fc1's GEMM and its backward into the GEMM that makes fc2's input gradient, and the
// residual add into the GEMM that ends a branch. Each saves a pass over an [M, N] activation.
//
//   linear_gelu_aux_forward(ctx, ln2, fc1_w, fc1_b, pre, act);      // pre = ln2 fc1^T + b, act = gelu(pre)
//   linear_residual_forward(ctx, act, fc2_w, fc2_b, x_mid, y);      // y = x_mid + act fc2^T + b
//   linear_backward(ctx, dy, act, fc2_w, Tensor(), dfc2_w, dfc2_b);  // fc2's weight gradients
//   linear_input_grad_dgelu(ctx, dy, fc2_w, pre, dpre);             // dpre = (dy fc2) * gelu'(pre)
//
// CUDA: one cuBLASLt GEMM each (epilogues GELU_AUX(_BIAS), DGELU, and C = residual), where the
// GELU epilogues can run (16-bit types, the GELU's width a multiple of 8), else the two steps.
// The epilogue applies the GELU to the f32 accumulator before rounding, so it differs from the
// two steps by bf16 rounding only. CPU: the two steps, bit-identical to calling them in turn.
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// x [M, K]; w [N, K]; b [N] or undefined; pre, y [M, N]: pre = x w^T + b, y = gelu(pre) (tanh).
void linear_gelu_aux_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                             const Tensor& y);
// dy [M, N]; w [N, K]; pre, dpre [M, K]: dpre = (dy w) * gelu'(pre) (overwritten).
void linear_input_grad_dgelu(const Context& ctx, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dpre);
// x [M, K]; w [N, K]; b [N] or undefined; residual, y [M, N], apart: y = residual + (x w^T + b).
void linear_residual_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& residual, const Tensor& y);

namespace cuda {
void linear_gelu_aux_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                             const Tensor& y);
void linear_input_grad_dgelu(const Context& ctx, const Tensor& dy, const Tensor& w, const Tensor& pre,
                             const Tensor& dpre);
void linear_residual_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& residual, const Tensor& y);
}  // namespace cuda

}  // namespace troupe
