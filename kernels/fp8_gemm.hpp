// FP8 GEMM in the one form Hopper's tensor cores take (cuBLASLt's "TN"): both operands stored
// with K contiguous.
//
//   d[M, N] = (a_scale_inv * b_scale_inv) * a[M, K] · b[N, K]^T  (+ bias[N])  (+ beta * d)
//
// a and b are u8 tensors of fp8 bytes (kernels/fp8.hpp) with their formats and dequantization
// scales (scale_inv, f32 [1] on the device): a linear forward is fp8_gemm(x, w); its input
// gradient fp8_gemm(dy, w^T) and weight gradient fp8_gemm(dy^T, x^T) with fp8_transpose'd copies.
// e4m3 x e4m3, e4m3 x e5m2 and e5m2 x e4m3; e5m2 x e5m2 is refused (cuBLASLt has no kernel).
// CUDA: cuBLASLt with f32 accumulation (no fast accumulation), d bf16, f16 or f32; M, N, K
// multiples of 16. CPU: the f32 GEMM of the fp8 values, then the scales.
#pragma once

#include "kernels/fp8.hpp"

namespace troupe {

struct Fp8Operand {
  Tensor data;  // u8 [rows, K]
  Fp8Format format = Fp8Format::e4m3;
  Tensor scale_inv;  // f32 [1], 16-byte aligned
};

// cuBLASLt reads an FP8 GEMM's scales only from 16-byte aligned addresses (elsewhere
// cublasLtMatmul answers CUBLAS_STATUS_NOT_SUPPORTED, found on an H200). A table of T scales
// meant for the GEMMs is [T, kFp8ScaleRow] f32, scale t at element t * kFp8ScaleRow.
constexpr int64_t kFp8ScaleRow = 4;

// d: [M, N] (f32 on the CPU; bf16, f16 or f32 on CUDA); bias: [N] of d's type or undefined;
// beta 0 overwrites d, 1 accumulates (f32 d only: weight gradients).
void fp8_gemm(const Context& ctx, const Fp8Operand& a, const Fp8Operand& b, const Tensor& d, float beta = 0.0f,
              const Tensor& bias = Tensor());

namespace cpu {
void fp8_gemm(const Fp8Operand& a, const Fp8Operand& b, const Tensor& d, float beta, const Tensor& bias);
}  // namespace cpu
namespace cuda {
void fp8_gemm(const Context& ctx, const Fp8Operand& a, const Fp8Operand& b, const Tensor& d, float beta,
              const Tensor& bias);
}  // namespace cuda

}  // namespace troupe
