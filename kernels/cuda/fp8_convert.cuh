// Device-side FP8 pieces shared by the cast kernels (fp8.cu) and the kernels that fuse a cast
// into the op producing the tensor (norm_kernels.cuh): the saturating conversions of
// kernels/fp8.hpp and the amax as bits.
//
//   unsigned best = 0;
//   best = max(best, abs_bits(v));   // per element a thread visits
//   amax_commit(best, amax);         // once per thread, every thread of the block present
#pragma once

#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/fp8.hpp"

namespace troupe::cuda {

template <Fp8Format F>
__device__ __forceinline__ uint8_t to_fp8(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, F == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2);
}

template <Fp8Format F>
__device__ __forceinline__ float from_fp8(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(b, F == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2);
  return __half2float(__half(h));
}

// |x| as bits: non-negative floats order as their bit patterns, NaN above infinity, so the max
// of the bits is the bits of the amax (the CPU backend compares the same way).
__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(x) & 0x7FFFFFFFu; }

// amax[0] = max(amax[0], the block's largest `best`): shuffles within each warp, the warps'
// maxima through shared memory, one atomic per block (one per warp would queue thousands of
// atomics on one address for a large tensor). Every thread of the block must call it (it holds
// a barrier); blockDim.x a multiple of 32, blockDim.y 1.
__device__ __forceinline__ void amax_commit(unsigned best, unsigned* amax) {
  __shared__ unsigned warp_best[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (warp != 0) return;
  best = lane < int(blockDim.x / 32) ? warp_best[lane] : 0u;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  if (lane == 0) atomicMax(amax, best);
}

}  // namespace troupe::cuda
