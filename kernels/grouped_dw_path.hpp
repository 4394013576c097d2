// Which way the CUDA backend makes grouped_linear_backward's weight gradient
// (kernels/grouped_linear.hpp: dw[g] += dy_g^T x_g in f32; the CPU backend has one way). Every way
// sums the products in f32 (on bf16/f16 inputs the exact products); they differ in speed, and
// tf32 and kernel in the order of the sums, so in the last bits:
//   kernel   ONE launch of our own tensor-core kernel for every group (kernels/cuda/grouped_dw_kernel.hpp:
//            a block per 128 x 128 tile of each dw[g], no atomics, the same bits every run). Takes
//            bf16/f16 inputs with N and K multiples of 8; f32 inputs, or N or K off a multiple of
//            8, take the streams way instead
//   loop     one cuBLASLt GEMM per non-empty group, one after another on ctx's stream
//   streams  the same GEMMs spread over side streams (kernels/cuda/stream_fork.cuh), beside dx on
//            ctx's stream: loop's bits, the small groups' GEMMs run at once
//   tf32     dy and x converted to f32 (bf16 and f16 are exact in TF32) and dw as ONE grouped GEMM,
//            cublasGemmGroupedBatchedEx with TF32 tensor cores (full FP32 on f32 inputs, which are
//            not exact in TF32), accumulating onto dw; needs two f32 copies of the activations
// Set with TROUPE_GROUPED_DW=kernel|loop|streams|tf32 (read at each call), or in code, as tests and
// benchmarks do. Unset or empty: kernel from kGroupedDwKernelGroups groups on, else streams (one
// H200, bench/grouped_gemm_bench: kernel 2.1-4.4x streams with 64 experts of [512, 512], 0.71x with
// 8 of Mixtral's larger ones, where the per-expert cuBLASLt GEMMs are big enough to run well):
//
//   troupe::ScopedGroupedDw use(troupe::GroupedDw::loop);
//   troupe::grouped_linear_backward(gpu, dy, x, w, offsets, dx, dw);   // the per-group loop
#pragma once

#include <cstdint>
#include <string_view>

namespace troupe {

enum class GroupedDw { loop, streams, tf32, kernel };

const char* grouped_dw_name(GroupedDw path);  // the TROUPE_GROUPED_DW spelling
// "loop", "streams", "tf32" or "kernel"; anything else throws naming TROUPE_GROUPED_DW and the values.
GroupedDw parse_grouped_dw(std::string_view value);
// From this many groups on the default way is kernel.
inline constexpr int64_t kGroupedDwKernelGroups = 16;
// The way for a weight gradient of `groups` groups: a ScopedGroupedDw's if one is alive, else
// TROUPE_GROUPED_DW's, else the default above.
GroupedDw grouped_dw(int64_t groups);

// Overrides the way (for the whole process) while it lives; restores the previous override.
class ScopedGroupedDw {
 public:
  explicit ScopedGroupedDw(GroupedDw path);
  ~ScopedGroupedDw();
  ScopedGroupedDw(const ScopedGroupedDw&) = delete;
  ScopedGroupedDw& operator=(const ScopedGroupedDw&) = delete;

 private:
  int previous_;
};

}  // namespace troupe
