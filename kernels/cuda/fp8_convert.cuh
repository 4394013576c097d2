// Device-side FP8 pieces shared by the cast kernels (fp8.cu) and the kernels that fuse a cast
// into the op producing the tensor (norm_kernels.cuh, activation.cu): the saturating conversions
// of kernels/fp8.hpp, the amax as bits, and an op's FP8 side output (Fp8SideOutput).
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

// An op's Fp8SideOutput as its kernel takes it.
struct Fp8SidePtrs {
  uint8_t* q;          // null: no cast
  const float* scale;  // with q
  unsigned* amax;      // null: no amax
  __host__ __device__ bool any() const { return q || amax; }
};

inline Fp8SidePtrs fp8_side_ptrs(const char* op, const Fp8SideOutput& out) {
  if (out.q.defined())
    TROUPE_CHECK(reinterpret_cast<uintptr_t>(out.q.data()) % 8 == 0, op,
                 ": the CUDA kernel needs the FP8 output 'q' 8-byte aligned, got ", out.q.str());
  return {out.q.defined() ? out.q.data_as<uint8_t>() : nullptr, out.q.defined() ? out.scale.data_as<float>() : nullptr,
          out.amax.defined() ? out.amax.data_as<unsigned>() : nullptr};
}

// One pack of an op's output y as stored: |y| folded into `best`, and, when out.q, the e4m3
// cast of y * scale written at out.q + offset (offset a multiple of the pack's size).
template <typename T>
__device__ __forceinline__ void fp8_side_pack(const Pack128<T>& y, const Fp8SidePtrs& out, float scale, int64_t offset,
                                              unsigned& best) {
  constexpr int P = Pack128<T>::size;
  alignas(8) uint8_t bytes[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float v = to_f32(y[i]);
    best = max(best, abs_bits(v));
    bytes[i] = to_fp8<Fp8Format::e4m3>(v * scale);
  }
  if (!out.q) return;
  if constexpr (P == 8)
    *reinterpret_cast<uint2*>(out.q + offset) = *reinterpret_cast<const uint2*>(bytes);
  else
    *reinterpret_cast<uint32_t*>(out.q + offset) = *reinterpret_cast<const uint32_t*>(bytes);
}

}  // namespace troupe::cuda
