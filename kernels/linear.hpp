// Linear layer (GEMM with optional bias), PyTorch layout: w is [out, in].
//   forward:  y[M, N]  = x[M, K] · w[N, K]^T + b[N]   (or y += ..., a residual add in the GEMM)
//             y[M, N]  = gelu(x[M, K] · w[N, K]^T + b[N])   (linear_gelu_forward: inference's fc1)
//   backward: dx[M, K] = dy[M, N] · w[N, K]          (overwrite, or += when accumulate_dx)
//             dw[N, K] += dy^T · x                   (f32, accumulates)
//             db[N]    += sum over rows of dy        (f32, accumulates)
// CPU: OpenBLAS sgemm. CUDA: cuBLASLt, bf16/f16 (or f32: full-precision FP32 compute, no TF32) inputs,
// f32 accumulation, f32 dw/db.
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// x: [M, K]; w: [N, K]; b: [N] or undefined; y: [M, N]. accumulate: y += x w^T + b.
void linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                    bool accumulate = false);
// y = gelu(x w^T + b), the tanh approximation as gelu_forward's (kernels/activation.hpp). On
// CUDA one GEMM with cuBLASLt's GELU epilogue; on the CPU the GEMM, then gelu_forward in place.
void linear_gelu_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y);
// dx may be undefined (no input gradient needed, e.g. first layer); dw and db may be undefined
// (zero-bubble's input-gradient op computes dx alone, the weight-gradient op dw and db later).
void linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                     const Tensor& dw, const Tensor& db, bool accumulate_dx = false);

namespace cpu {
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool accumulate);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
                     const Tensor& db, bool accumulate_dx);
// db[N] += column sums of dy[M, N] (f32).
void bias_grad_accumulate(const Tensor& dy, const Tensor& db);
}  // namespace cpu
namespace cuda {
void linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                    bool accumulate);
void linear_gelu_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y);
void linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                     const Tensor& dw, const Tensor& db, bool accumulate_dx);
void bias_grad_accumulate(const Context& ctx, const Tensor& dy, const Tensor& db);
}  // namespace cuda

}  // namespace troupe
