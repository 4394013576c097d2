// LayerNorm and RMSNorm over the last dimension of [N, C] rows.
//   layernorm: y = (x - mean) * rstd * w + b,   rstd = 1/sqrt(var + eps)  (biased variance)
//   rmsnorm:   y = x * rstd * w,                rstd = 1/sqrt(mean(x^2) + eps)
// And RMSNorm per attention head inside a fused activation (Megatron's --qk-layernorm, Qwen3's
// q_norm / k_norm): the same math on rows of D values that lie a head apart in each token's row.
//
//   rmsnorm_forward(ctx, x, w, eps, y, rstd);                               // x, y [N, C]
//   rmsnorm_heads_forward(ctx, qk, q_norm_w, eps, {0, H}, qkv, q_rstd);     // the H query heads
//
// A norm feeding an FP8 linear can also write the e4m3 cast of its output, or only fold its |y|
// into an amax, in the same pass (Fp8SideOutput, kernels/fp8.hpp):
//   layernorm_forward(ctx, x, w, b, eps, y, mean, rstd, {q, scale, amax});
#pragma once

#include "kernels/fp8.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// x, y: [N, C]; w, b: [C] (b may be undefined: no bias); mean, rstd: f32 [N] (saved for backward);
// fp8: y's FP8 side output (kernels/fp8.hpp), if any.
void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd, const Fp8SideOutput& fp8 = {});
// dx [N, C] += d(loss)/dx  (ACCUMULATES: x is the residual stream); dw, db f32 [C] +=. With dx_in
// [N, C]: dx = dx_in + d(loss)/dx, dx_in left as it was (the residual stream's gradient kept).
void layernorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db,
                        const Tensor& dx_in = Tensor());

// x, y: [N, C]; w: [C]; rstd: f32 [N]; fp8 as layernorm_forward's.
void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd, const Fp8SideOutput& fp8 = {});
// dx [N, C] += ... (with dx_in: dx = dx_in + ...); dw f32 [C] +=.
void rmsnorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw, const Tensor& dx_in = Tensor());

// Heads [first, first + count) of every row of a fused activation, each head D values.
struct HeadSpan {
  int64_t first = 0;
  int64_t count = 0;
};

// x [N, Wx] and y [N, Wy] hold heads of D = w.dim(0) values one after another in each row. Each
// head of `heads` is RMS-normalized as a row of its own with the shared weight w [D], and written
// to the same head of y (the rest of y is untouched; y may be x: in place). rstd: f32 [N, count].
void rmsnorm_heads_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, HeadSpan heads,
                           const Tensor& y, const Tensor& rstd);
// dy, dx [N, Wd]; x, w, rstd as in forward. dx's heads of `heads` are OVERWRITTEN with d(loss)/dx
// (dx may be dy: in place; its other heads are untouched); dw f32 [D] +=.
void rmsnorm_heads_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                            HeadSpan heads, const Tensor& dx, const Tensor& dw);

namespace cpu {
void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dx_in);
void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw, const Tensor& dx_in);
void rmsnorm_heads_forward(const Tensor& x, const Tensor& w, float eps, HeadSpan heads, const Tensor& y,
                           const Tensor& rstd);
void rmsnorm_heads_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, HeadSpan heads,
                            const Tensor& dx, const Tensor& dw);
}  // namespace cpu
namespace cuda {
void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd, const Fp8SideOutput& fp8);
void layernorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dx_in);
void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd, const Fp8SideOutput& fp8);
void rmsnorm_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw, const Tensor& dx_in);
void rmsnorm_heads_forward(const Context& ctx, const Tensor& x, const Tensor& w, float eps, HeadSpan heads,
                           const Tensor& y, const Tensor& rstd);
void rmsnorm_heads_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                            HeadSpan heads, const Tensor& dx, const Tensor& dw);
}  // namespace cuda

}  // namespace troupe
