// Inference's norm then linear, y = linear(norm(x)): the LayerNorm / RMSNorm in front of the
// qkv, fc1 and LM head GEMMs. On CUDA at decode-size batches (1 to 8 rows, bf16/f16; see
// kernels/cuda/gemv.hpp) one kernel: the GEMV normalizes x's rows as it reads them, saving the
// norm's launch and its round trip through memory. Otherwise, and with TROUPE_DECODE_GEMV=0,
// the norm into scratch.ln, then linear_forward (or linear_gelu_forward).
//
//   norm_linear_forward(ctx, x, {NormKind::layernorm, ln_w, ln_b, eps}, fc1_w, fc1_b, act, /*gelu=*/true,
//                       {ln, mean, rstd});
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

enum class NormKind { layernorm, rmsnorm };

// The norm in front of the linear, as kernels/norm.hpp computes it.
struct NormWeights {
  NormKind kind = NormKind::layernorm;
  Tensor w;  // [K]
  Tensor b;  // [K]: LayerNorm's bias, or undefined (always undefined for RMSNorm)
  float eps = 1e-5f;
};

// Where the unfused path writes norm(x): ln [M, K] (x's type); mean, rstd f32 [M] (mean is
// unused by RMSNorm).
struct NormScratch {
  Tensor ln, mean, rstd;
};

// x: [M, K]; w: [N, K]; b: [N] or undefined; y: [M, N]; gelu: y = gelu(norm(x) w^T + b) as
// linear_gelu_forward. Only y (and, unfused, the scratch) is written.
void norm_linear_forward(const Context& ctx, const Tensor& x, const NormWeights& norm, const Tensor& w, const Tensor& b,
                         const Tensor& y, bool gelu, const NormScratch& scratch);

}  // namespace troupe
