// Small-batch GEMV: the CUDA linear layers' path for a decode step's few rows (issue 21).
//
//   y[M, N] = x[M, K] · w[N, K]^T + b[N]        (or y += ..., or gelu(...) after the bias)
//
// At M <= 8 a GEMM is a stream over the weight: cuBLASLt spends several microseconds of fixed
// overhead per call where reading a GPT-2 768x2304 bf16 weight takes about 1.2 us. Here each
// warp owns one or two output columns and streams their weight rows in 16-byte loads; the few
// rows of x come through L1; f32 accumulation in a fixed order (bitwise deterministic).
// linear_forward / linear_gelu_forward (kernels/cuda/linear.cu) take this path whenever
// gemv_applies() says so:
//
//   if (gemv_applies(x, w, y)) gemv_forward(ctx, x, w, b, y, accumulate, /*gelu=*/false);
//
// Plain C++ (no device code), so tests and benchmarks can call it.
#pragma once

#include "kernels/tensor.hpp"

namespace troupe::cuda {

// The most rows of x the GEMV path takes; larger batches go to cuBLASLt.
constexpr int64_t kGemvMaxRows = 8;
// The most rows linear_forward sends to it: on an H100 the kernel beats cuBLASLt at 1 row (GPT-2
// 124M decode 0.466 -> 0.379 ms/step) but not from 2-3 rows on (350M: 0.996 -> 1.048 ms at 2;
// bench/results/2026-11-26-h100-decode-gemv.md).
constexpr int64_t kGemvDispatchRows = 1;

// TROUPE_DECODE_GEMV, read once per process: unset or "1" on, "0" off (every linear then runs on
// cuBLASLt, for comparisons such as bench/decode_bench.cpp's).
bool decode_gemv_enabled();
// The value of TROUPE_DECODE_GEMV as decode_gemv_enabled() reads it (null: unset). Throws
// troupe::Error naming the variable for anything but "0" or "1".
bool decode_gemv_flag_from(const char* value);
// With TROUPE_DECODE_PDL unset or "1" the GEMVs are launched with programmatic dependent launch
// on Hopper: they stream their first weights while the kernel before them ends
// (kernels/cuda/dependent_launch.cuh).

// True when the GEMV kernel can compute this linear (whatever decode_gemv_enabled() says): 1 to
// kGemvMaxRows rows, bf16 or f16, K a multiple of 8 and x and w 16-byte aligned (16-byte loads).
// Shapes and dtypes must already be checked (kernels/linear.cpp).
bool gemv_supports(const Tensor& x, const Tensor& w, const Tensor& y);
// decode_gemv_enabled() && gemv_supports(...) && at most kGemvDispatchRows rows: the dispatch in
// linear_forward / linear_gelu_forward (and the fused norm in front, kernels/norm_linear.hpp).
bool gemv_applies(const Tensor& x, const Tensor& w, const Tensor& y);

enum class GemvNorm { none, layernorm, rmsnorm };

// Enqueues y = x w^T + b (b may be undefined) on ctx's stream; accumulate: y += ...; gelu: the
// tanh approximation of kernels/activation.hpp after the bias (not with accumulate). Requires
// gemv_supports(x, w, y).
void gemv_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                  bool accumulate, bool gelu);

// gemv_supports, and norm_w (and norm_b when defined) 16-byte aligned.
bool gemv_norm_supports(const Tensor& x, const Tensor& norm_w, const Tensor& norm_b, const Tensor& w, const Tensor& y);
// y = norm(x) w^T + b (then GELU with gelu): LayerNorm (norm_b optional) or RMSNorm (norm_b
// undefined) of x's rows over K, as kernels/norm.hpp computes it, the normalized rows rounded
// to x's type as the unfused norm's output is, inside the GEMV: every block recomputes the
// rows' mean and rstd (K values each, from L1), which costs less than a norm kernel's launch.
// Requires gemv_norm_supports(x, norm_w, norm_b, w, y).
void gemv_norm_forward(const Context& ctx, const Tensor& x, GemvNorm norm, const Tensor& norm_w, const Tensor& norm_b,
                       float eps, const Tensor& w, const Tensor& b, const Tensor& y, bool gelu);

}  // namespace troupe::cuda
