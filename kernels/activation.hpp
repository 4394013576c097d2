// Pointwise activations.
//   gelu (tanh approximation): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   swiglu: x is [N, 2F] with halves [gate | up] per row;  y[N, F] = silu(gate) * up
#pragma once

#include "kernels/fp8.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// x, y: same shape. fp8: y's FP8 side output (kernels/fp8.hpp) in the same pass, if any (fc2's
// input cast in an FP8 MLP).
void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Fp8SideOutput& fp8 = {});
// dx = dy * gelu'(x)  (overwrite; dx may alias dy).
void gelu_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx);
// gelu_backward on [rows, cols] tensors that also sums dx's columns into db (f32 [cols],
// accumulated): the bias gradient of the linear layer in front of the GELU, in the same pass.
void gelu_backward_bias_grad(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx, const Tensor& db);

// x: [N, 2F]; y: [N, F].
void swiglu_forward(const Context& ctx, const Tensor& x, const Tensor& y);
// dy: [N, F]; dx: [N, 2F] (overwrite).
void swiglu_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx);

namespace cpu {
void gelu_forward(const Tensor& x, const Tensor& y);
void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx);
void swiglu_forward(const Tensor& x, const Tensor& y);
void swiglu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx);
}  // namespace cpu
namespace cuda {
void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Fp8SideOutput& fp8);
void gelu_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx);
void gelu_backward_bias_grad(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx, const Tensor& db);
void swiglu_forward(const Context& ctx, const Tensor& x, const Tensor& y);
void swiglu_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx);
}  // namespace cuda

}  // namespace troupe
