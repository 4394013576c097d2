// Pointwise ops on CUDA. Each thread handles one 16-byte pack of the vectorizable prefix
// and at most one element of the scalar tail, so any element count works; a tensor whose
// data is not 16-byte aligned (a slice at an odd offset) runs scalar throughout.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 256;
// convert moves 8 elements per thread: one pack of a 16-bit type, two of f32.
constexpr int kConvertGroup = 8;

// Elements [0, n_vec) go in groups of `group`, [n_vec, n) one by one; n_vec is 0 when any
// pointer is misaligned.
int64_t vector_prefix(int64_t n, int group, std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return 0;
  return n / group * group;
}

unsigned grid_for(int64_t n, int64_t n_vec, int group) {
  return ceil_div(std::max(n_vec / group, n - n_vec), kThreads);
}

// out = a + b; out may alias a or b (every element is read before it is written).
template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n, int64_t n_vec) {
  constexpr int P = Pack128<T>::size;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i * P < n_vec) {
    const Pack128<T> x = load128(a + i * P), y = load128(b + i * P);
    Pack128<T> z;
#pragma unroll
    for (int k = 0; k < P; ++k) z[k] = from_f32<T>(to_f32(x[k]) + to_f32(y[k]));
    store128(out + i * P, z);
  }
  const int64_t j = n_vec + i;
  if (j < n) out[j] = from_f32<T>(to_f32(a[j]) + to_f32(b[j]));
}

template <typename T>
__global__ void scale_kernel(T* x, float s, int64_t n, int64_t n_vec) {
  constexpr int P = Pack128<T>::size;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i * P < n_vec) {
    Pack128<T> v = load128(x + i * P);
#pragma unroll
    for (int k = 0; k < P; ++k) v[k] = from_f32<T>(to_f32(v[k]) * s);
    store128(x + i * P, v);
  }
  const int64_t j = n_vec + i;
  if (j < n) x[j] = from_f32<T>(to_f32(x[j]) * s);
}

template <typename T>
__device__ __forceinline__ void load_group(const T* p, float (&v)[kConvertGroup]) {
  constexpr int P = Pack128<T>::size;
#pragma unroll
  for (int k = 0; k < kConvertGroup; k += P) {
    const Pack128<T> pk = load128cs(p + k);
#pragma unroll
    for (int e = 0; e < P; ++e) v[k + e] = to_f32(pk[e]);
  }
}

template <typename T>
__device__ __forceinline__ void store_group(T* p, const float (&v)[kConvertGroup]) {
  constexpr int P = Pack128<T>::size;
#pragma unroll
  for (int k = 0; k < kConvertGroup; k += P) {
    Pack128<T> pk;
#pragma unroll
    for (int e = 0; e < P; ++e) pk[e] = from_f32<T>(v[k + e]);
    store128(p + k, pk);
  }
}

// dst = src through f32 (exact for 16-bit sources), rounded to nearest even.
template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n, int64_t n_vec) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i * kConvertGroup < n_vec) {
    float v[kConvertGroup];
    load_group(src + i * kConvertGroup, v);
    store_group(dst + i * kConvertGroup, v);
  }
  const int64_t j = n_vec + i;
  if (j < n) dst[j] = from_f32<D>(to_f32(src[j]));
}

}  // namespace

void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_float(a.dtype(), "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = a.numel(), n_vec = vector_prefix(n, Pack128<T>::size, {a.data(), b.data(), out.data()});
    if (n == 0) return;
    add_kernel<T><<<grid_for(n, n_vec, Pack128<T>::size), kThreads, 0, stream_of(ctx)>>>(a.data_as<T>(), b.data_as<T>(),
                                                                                         out.data_as<T>(), n, n_vec);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void scale_inplace(const Context& ctx, const Tensor& x, float s) {
  dispatch_float(x.dtype(), "scale_inplace", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = x.numel(), n_vec = vector_prefix(n, Pack128<T>::size, {x.data()});
    if (n == 0) return;
    scale_kernel<T><<<grid_for(n, n_vec, Pack128<T>::size), kThreads, 0, stream_of(ctx)>>>(x.data_as<T>(), s, n, n_vec);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void convert(const Context& ctx, const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) {  // a byte copy, enqueued on ctx's stream
    copy(ctx, src, dst.view(src.shape()));
    return;
  }
  dispatch_float(src.dtype(), "convert", [&](auto src_tag) {
    dispatch_float(dst.dtype(), "convert", [&](auto dst_tag) {
      using S = typename decltype(src_tag)::type;
      using D = typename decltype(dst_tag)::type;
      const int64_t n = src.numel(), n_vec = vector_prefix(n, kConvertGroup, {src.data(), dst.data()});
      if (n == 0) return;
      convert_kernel<S, D><<<grid_for(n, n_vec, kConvertGroup), kThreads, 0, stream_of(ctx)>>>(
          src.data_as<S>(), dst.data_as<D>(), n, n_vec);
      TROUPE_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace troupe::cuda
