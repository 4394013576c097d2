// Grouped linear layer: G independent GEMMs over consecutive row ranges of one input, each with
// its own weight (the experts of a mixture-of-experts layer, rows permuted expert by expert).
//   y[o_g : o_{g+1}] = x[o_g : o_{g+1}] · w[g]^T         for g in [0, G)
//   dx[o_g : o_{g+1}] = dy[o_g : o_{g+1}] · w[g]          (overwrite)
//   dw[g] += dy[o_g : o_{g+1}]^T · x[o_g : o_{g+1}]       (f32, accumulates)
// CPU: a loop over linear_forward / linear_backward (kernels/linear.hpp), skipping empty groups.
// CUDA: y and dx are one cuBLAS grouped GEMM (cublasGemmGroupedBatchedEx, every non-empty group
// in one launch); dw, which must accumulate in f32 where the grouped GEMM has no bf16-in / f32-out
// form, is one launch of our own tensor-core kernel for every group, or one cuBLASLt GEMM per
// group spread over side streams beside dx, or one after another, or one f32 grouped GEMM on TF32
// tensor cores: TROUPE_GROUPED_DW (kernels/grouped_dw_path.hpp, kernels/cuda/grouped_linear.cu).
// The GPU's work stays in ctx's stream's order either way.
//
//   std::vector<int64_t> offsets = {0, 3, 3, 7};   // 3 groups: 3 rows, none, 4 rows
//   grouped_linear_forward(ctx, x, w, offsets, y);  // x [7, K], w [3, N, K], y [7, N]
//
// A second forward takes the offsets as an i32 tensor on ctx's device (offsets a kernel
// computed, e.g. an MoE routing's): no host synchronization, and on CUDA one kernel launched
// with a grid fixed by R, G and N (kernels/cuda/grouped_linear_offsets.cu), so it can be
// captured in a CUDA graph. The CPU backend copies the offsets and runs the loop above.
//
//   grouped_linear_forward(ctx, x, w, device_offsets, y);   // device_offsets i32 [G + 1]
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

// x: [R, K]; w: [G, N, K]; offsets: G + 1 ascending host row offsets from 0 to R; y: [R, N].
void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                            const Tensor& y);
// The same with offsets an i32 [G + 1] tensor on ctx's device. On CUDA they are not checked
// (device data): offsets outside [0, R] are clamped, so bad ones give wrong rows, never a fault.
void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& offsets,
                            const Tensor& y);
// dy: [R, N]; dx: [R, K] or undefined; dw: f32 [G, N, K].
void grouped_linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const std::vector<int64_t>& offsets, const Tensor& dx, const Tensor& dw);

namespace cuda {
void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                            const Tensor& y);
void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& offsets,
                            const Tensor& y);
void grouped_linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const std::vector<int64_t>& offsets, const Tensor& dx, const Tensor& dw);
}  // namespace cuda

}  // namespace troupe
