// Shared device-side helpers: 16-bit <-> f32 conversion, 16-byte vector loads,
// warp/block reductions, and dispatch from DType to a kernel's element type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_state.cuh"
#include "kernels/dtype.hpp"

namespace troupe::cuda {

template <typename T>
__device__ __forceinline__ float to_f32(T x);
template <>
__device__ __forceinline__ float to_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// 16 bytes of T: one vectorized load/store (llm.c's Packed128).
template <typename T>
struct alignas(16) Pack128 {
  static constexpr int size = 16 / sizeof(T);
  T v[size];
  __device__ __forceinline__ T& operator[](int i) { return v[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};
template <typename T>
__device__ __forceinline__ Pack128<T> load128(const T* p) {
  return *reinterpret_cast<const Pack128<T>*>(p);
}
// Streaming load: data read once, do not keep it in L1/L2.
template <typename T>
__device__ __forceinline__ Pack128<T> load128cs(const T* p) {
  Pack128<T> r;
  *reinterpret_cast<int4*>(&r) = __ldcs(reinterpret_cast<const int4*>(p));
  return r;
}
template <typename T>
__device__ __forceinline__ void store128(T* p, const Pack128<T>& x) {
  *reinterpret_cast<Pack128<T>*>(p) = x;
}
// Streaming store: data not read again soon, do not keep it in L1/L2.
template <typename T>
__device__ __forceinline__ void store128cs(T* p, const Pack128<T>& x) {
  __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&x));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float x) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < nwarps ? shared[lane] : 0.0f;
  return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(x);
}

// Index of the last entry of ascending first[0..count) that is <= value: in a multi-tensor
// launch, the tensor (segment) that block `value` belongs to.
__device__ __forceinline__ int last_not_above(const int32_t* first, int count, int value) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] <= value)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

inline unsigned ceil_div(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the CUDA type of a floating DType:
//   dispatch_float(x.dtype(), "gelu", [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::bf16:
      f(TypeTag<__nv_bfloat16>{});
      return;
    case DType::f16:
      f(TypeTag<__half>{});
      return;
    case DType::f32:
      f(TypeTag<float>{});
      return;
    default:
      TROUPE_FAIL(op, ": unsupported dtype ", dtype_name(t), " on CUDA");
  }
}

// dispatch_float for the 16-bit types only (kernels built for bf16 and f16).
template <typename F>
void dispatch_16bit(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::bf16:
      f(TypeTag<__nv_bfloat16>{});
      return;
    case DType::f16:
      f(TypeTag<__half>{});
      return;
    default:
      TROUPE_FAIL(op, ": needs bf16 or f16 on CUDA, got ", dtype_name(t));
  }
}

// The cuBLAS / cuBLASLt data type of a floating DType (bf16, f16, f32); `op` names the caller.
inline cudaDataType_t blas_data_type(DType t, const char* op) {
  cudaDataType_t type = CUDA_R_32F;
  dispatch_float(t, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    type = std::is_same_v<T, __nv_bfloat16> ? CUDA_R_16BF : std::is_same_v<T, __half> ? CUDA_R_16F : CUDA_R_32F;
  });
  return type;
}

}  // namespace troupe::cuda
