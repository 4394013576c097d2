// LayerNorm and RMSNorm over the last dimension of [N, C] rows.
//   layernorm: y = (x - mean) * rstd * w + b,   rstd = 1/sqrt(var + eps)  (biased variance)
//   rmsnorm:   y = x * rstd * w,                rstd = 1/sqrt(mean(x^2) + eps)
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// x, y: [N, C]; w, b: [C] (b may be undefined: no bias); mean, rstd: f32 [N] (saved for backward).
void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd);
// dx [N, C] += d(loss)/dx  (ACCUMULATES: x is the residual stream); dw, db f32 [C] +=.
void layernorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db);

// x, y: [N, C]; w: [C]; rstd: f32 [N].
void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd);
// dx [N, C] += ...; dw f32 [C] +=.
void rmsnorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw);

namespace cpu {
void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, const Tensor& db);
void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw);
}  // namespace cpu
namespace cuda {
void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd);
void layernorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db);
void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd);
void rmsnorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw);
}  // namespace cuda

}  // namespace troupe
