// FP8 as a compute format (Transformer Engine style): per-tensor scaled casts to e4m3 / e5m2,
// the amax they are scaled from, and the scale update of delayed and current scaling.
// Quantized tensors are u8 tensors of fp8 bytes; their format travels beside them.
//
//   fp8_amax(ctx, x, amax);                                           // amax[0] = max(amax[0], max|x|)
//   fp8_scales_update(ctx, amax_history, scale, scale_inv, {448.0f}); // scale = 448 / amax
//   fp8_cast(ctx, x, scale, Fp8Format::e4m3, q);                      // q = fp8(x * scale)
//   fp8_gemm(ctx, {q, Fp8Format::e4m3, scale_inv}, {qw, ...}, y);     // kernels/fp8_gemm.hpp
//
// The casts round to nearest even and saturate to the largest finite value (|x| beyond it,
// infinities included, become +-max; NaN stays NaN), as CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2
// constructors (__NV_SATFINITE). CPU: the same rounding emulated on f32 bits; CUDA: cuda_fp8.h.
#pragma once

#include <cstdint>

#include "kernels/tensor.hpp"

namespace troupe {

enum class Fp8Format : uint8_t {
  e4m3,  // 4 exponent bits, 3 mantissa bits, no infinities: max 448, smallest subnormal 2^-9
  e5m2,  // 5 exponent bits, 2 mantissa bits (IEEE-like): max 57344, smallest subnormal 2^-16
};

// The largest finite value: 448 or 57344.
float fp8_max(Fp8Format f);
const char* fp8_format_name(Fp8Format f);

// Host scalar conversions, the reference every backend is tested against.
uint8_t fp8_from_f32(float x, Fp8Format f);
float fp8_to_f32(uint8_t bits, Fp8Format f);

// q = fp8(x * scale[0]) elementwise. x: f32 (CPU) or bf16/f16/f32 (CUDA); scale: f32 [1] on
// ctx's device; q: u8, x's numel. amax: undefined, or f32 [1] updated as fp8_amax(x, amax) does,
// in the same pass over x (delayed scaling records what it casts).
void fp8_cast(const Context& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q,
              const Tensor& amax = Tensor());
// y = value(q) * scale_inv[0] in y's type (f32 on the CPU; bf16/f16/f32 on CUDA).
void fp8_dequantize(const Context& ctx, const Tensor& q, Fp8Format f, const Tensor& scale_inv, const Tensor& y);
// amax[0] = max(amax[0], max over i of |x[i]|), f32 [1] on ctx's device: accumulates over the
// casts of a step (zero it to start afresh). Exact on every backend; a NaN in x makes it NaN.
void fp8_amax(const Context& ctx, const Tensor& x, const Tensor& amax);
// qt [C, R] = q [R, C] transposed (u8): cuBLASLt's FP8 GEMM wants both operands K-contiguous.
void fp8_transpose(const Context& ctx, const Tensor& q, const Tensor& qt);
// qt [C, R] = the cast of x [R, C] (as fp8_cast, amax too), transposed, and q [R, C] the cast
// itself when defined (undefined: only qt is written). On CUDA one pass over x for 16-bit x with
// R and C multiples of 8; otherwise the cast, then fp8_transpose.
void fp8_cast_transpose(const Context& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q,
                        const Tensor& qt, const Tensor& amax = Tensor());

// The FP8 side output of an op that feeds an FP8 linear (a norm, the GELU: model/fp8/
// fp8_linears.hpp's input_cast), written by the op in its own pass, bit for bit what
// fp8_side_output below writes after it: q = e4m3(y * scale[0]) with y as the op stored it
// (rounded to its dtype first), amax[0] = max(amax[0], max |y|). q undefined: only the amax
// (tensorwise scaling needs it before the cast); amax undefined: only the cast. e4m3 only: the
// forward format of every recipe.
struct Fp8SideOutput {
  Tensor q;      // u8, y's shape; 8-byte aligned on CUDA
  Tensor scale;  // f32 [1] (with q)
  Tensor amax;   // f32 [1]
  bool any() const { return q.defined() || amax.defined(); }
};
// The side output of y by the separate ops: fp8_cast folding the amax, or fp8_amax alone. The
// CPU backend's ops run this after computing y; the CUDA kernels equal it.
void fp8_side_output(const Context& ctx, const Tensor& y, const Fp8SideOutput& out);
// An op's checks of its side output for its output y (errors name op and argument).
void expect_fp8_side_output(const Context& ctx, const char* op, const Fp8SideOutput& out, const Tensor& y);

// How scales follow amaxes (the recipe's numbers; model/fp8_recipe.hpp has the flags).
struct Fp8ScalingParams {
  float fp8_max = 448.0f;
  int margin = 0;             // scale = fp8_max / amax / 2^margin (any integer)
  bool amax_max = false;      // amax over the whole history (true) or its newest row (false)
  bool roll_history = false;  // delayed scaling: shift the history one row older, row 0 zeroed
};

// For T tensors: amax_history f32 [L, T] (row 0: the amaxes fp8_amax accumulated this step,
// row k: k steps older), scale f32 [T] and scale_inv f32 [T] or [T, r] (then scale_inv[t] is
// element t * r: kFp8ScaleRow in kernels/fp8_gemm.hpp aligns it for the GEMMs; the other
// columns are left as they are), all on ctx's device. Per tensor t, from
// amax = history[0, t] (or the max over rows): where amax is finite and > 0,
// scale[t] = min(fp8_max / amax * 2^-margin, FLT_MAX) and scale_inv[t] = 1 / scale[t]; elsewhere
// both stay (Transformer Engine's rule). Then, with roll_history, row k+1 = row k and row 0 = 0.
void fp8_scales_update(const Context& ctx, const Tensor& amax_history, const Tensor& scale, const Tensor& scale_inv,
                       const Fp8ScalingParams& params);

namespace cpu {
void fp8_cast(const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q);
void fp8_dequantize(const Tensor& q, Fp8Format f, const Tensor& scale_inv, const Tensor& y);
void fp8_amax(const Tensor& x, const Tensor& amax);
void fp8_transpose(const Tensor& q, const Tensor& qt);
void fp8_scales_update(const Tensor& amax_history, const Tensor& scale, const Tensor& scale_inv,
                       const Fp8ScalingParams& params);
}  // namespace cpu
namespace cuda {
void fp8_cast(const Context& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q,
              const Tensor& amax);
void fp8_dequantize(const Context& ctx, const Tensor& q, Fp8Format f, const Tensor& scale_inv, const Tensor& y);
void fp8_amax(const Context& ctx, const Tensor& x, const Tensor& amax);
void fp8_transpose(const Context& ctx, const Tensor& q, const Tensor& qt);
// The one-pass cast-transpose; false (nothing done) where its shape or alignment rules fail.
bool fp8_cast_transpose_fused(const Context& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q,
                              const Tensor& qt, const Tensor& amax);
void fp8_scales_update(const Context& ctx, const Tensor& amax_history, const Tensor& scale, const Tensor& scale_inv,
                       const Fp8ScalingParams& params);
}  // namespace cuda

}  // namespace troupe
