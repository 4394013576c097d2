// The grouped weight gradient as ONE launch of our own tensor-core kernel (the `kernel` way of
// kernels/grouped_dw_path.hpp): for every group g at once
//   dw[g] [N, K] f32 += dy[o_g : o_{g+1}]^T x[o_g : o_{g+1}]      (dy [R, N], x [R, K], bf16 or f16)
// with the row offsets an i32 [G + 1] tensor on ctx's device, so the launch (its grid fixed by G,
// N and K) does not depend on the split. Each block owns one 128 x 128 tile of one dw[g] and sums
// its group's rows in a fixed order: no atomics, the same bits every run. Products are exact in
// f32 and summed in f32; the order differs from cuBLAS's, so the last bits do.
//
//   if (grouped_dw_kernel_fits(dy, x, dw)) grouped_dw_kernel(ctx, dy, x, device_offsets, dw);
//
// Plain C++ declarations (the kernel is in grouped_dw_kernel.cu).
#pragma once

#include "kernels/tensor.hpp"

namespace troupe::cuda {

// Whether the kernel takes these operands: bf16 or f16 inputs (f32 ones take another way), N and
// K multiples of 8 (16-byte loads of whole rows' chunks), dy and x 16-byte aligned, G <= 65535
// (the grid's y) and R within int32 (the offsets). The caller falls back to the per-group GEMMs
// otherwise.
bool grouped_dw_kernel_fits(const Tensor& dy, const Tensor& x, const Tensor& dw);

// dy [R, N], x [R, K] (the same 16-bit type), offsets i32 [G + 1] on ctx's device (ascending from
// 0 to R; values outside [0, R] are clamped, so bad ones give wrong sums, never a fault), dw f32
// [G, N, K], accumulated. Enqueued on ctx's stream; needs grouped_dw_kernel_fits.
void grouped_dw_kernel(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& offsets, const Tensor& dw);

}  // namespace troupe::cuda
