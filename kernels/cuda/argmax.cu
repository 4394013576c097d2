// One block per row: each thread keeps a running (max, its first index, sum of exp(x - max))
// over a strided part of the row; warps, then the block, merge those triples. Rows whose
// starts are 16-byte aligned are read in 16-byte packs, several in flight per thread (a row of
// 50k logits is a few loads per thread, not a hundred dependent steps).
#include "kernels/argmax.hpp"
#include "base/check.hpp"
#include "kernels/cuda/common.cuh"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 512;

struct Running {
  float max;
  int index;
  float sum;  // of exp(x - max)
};

// Merges b into a; on equal maxima the lower index wins.
__device__ __forceinline__ void merge(Running& a, const Running& b) {
  if (b.sum == 0.0f) return;  // b saw nothing
  if (a.sum == 0.0f) {
    a = b;
    return;
  }
  const float m = fmaxf(a.max, b.max);
  const int index = a.max > b.max || (a.max == b.max && a.index < b.index) ? a.index : b.index;
  a.sum = a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m);
  a.max = m;
  a.index = index;
}

__device__ __forceinline__ Running warp_merge(Running r) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Running other{__shfl_xor_sync(0xffffffffu, r.max, o), __shfl_xor_sync(0xffffffffu, r.index, o),
                        __shfl_xor_sync(0xffffffffu, r.sum, o)};
    merge(r, other);
  }
  return r;
}

// Folds element j (value v) into r; strictly greater: an earlier index keeps a tie.
__device__ __forceinline__ void fold(Running& r, float v, int j) {
  if (r.sum == 0.0f) {
    r = {v, j, 1.0f};
  } else if (v > r.max) {
    r.sum = r.sum * __expf(r.max - v) + 1.0f;
    r.max = v;
    r.index = j;
  } else {
    r.sum += __expf(v - r.max);
  }
}

// Folds a pack of P elements starting at index j: the pack's first maximum, then one rescale.
template <int P>
__device__ __forceinline__ void fold_pack(Running& r, const float (&v)[P], int j) {
  float m = v[0];
  int at = 0;
#pragma unroll
  for (int e = 1; e < P; ++e)
    if (v[e] > m) {
      m = v[e];
      at = e;
    }
  if (r.sum == 0.0f || m > r.max) {
    r.sum = r.sum == 0.0f ? 0.0f : r.sum * __expf(r.max - m);
    r.max = m;
    r.index = j + at;
  }
#pragma unroll
  for (int e = 0; e < P; ++e) r.sum += __expf(v[e] - r.max);
}

template <typename T, bool kPacked>
__global__ void argmax_logprob_kernel(const T* __restrict__ logits, int64_t vp, int64_t vocab,
                                      int32_t* __restrict__ tokens, float* __restrict__ logprobs,
                                      float* __restrict__ maxes) {
  constexpr int P = Pack128<T>::size, kInFlight = 4;
  const T* x = logits + int64_t(blockIdx.x) * vp;
  Running r{-INFINITY, 0, 0.0f};
  int64_t tail = 0;  // where the scalar part starts
  if constexpr (kPacked) {
    const int64_t packs = vocab / P;
    tail = packs * P;
    const int64_t stride = int64_t(blockDim.x) * kInFlight;
    for (int64_t p0 = threadIdx.x; p0 < packs; p0 += stride) {
      Pack128<T> v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t p = p0 + int64_t(u) * blockDim.x;
        if (p < packs) v[u] = load128cs(x + p * P);
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t p = p0 + int64_t(u) * blockDim.x;
        if (p >= packs) break;
        float f[P];
#pragma unroll
        for (int e = 0; e < P; ++e) f[e] = to_f32(v[u][e]);
        fold_pack<P>(r, f, int(p * P));
      }
    }
  }
  for (int64_t j = tail + threadIdx.x; j < vocab; j += blockDim.x) fold(r, to_f32(x[j]), int(j));
  r = warp_merge(r);
  __shared__ Running warps[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = r;
  __syncthreads();
  if (warp == 0) {
    r = lane < int(blockDim.x / 32) ? warps[lane] : Running{-INFINITY, 0, 0.0f};
    r = warp_merge(r);
    if (lane == 0) {
      tokens[blockIdx.x] = r.index;
      logprobs[blockIdx.x] = -logf(r.sum);
      if (maxes != nullptr) maxes[blockIdx.x] = r.max;
    }
  }
}

}  // namespace

void argmax_logprob(const Context& ctx, const Tensor& logits, int64_t vocab, const Tensor& tokens,
                    const Tensor& logprobs, const Tensor& maxes) {
  const int64_t s = logits.dim(0);
  if (s == 0) return;
  TROUPE_CHECK(s <= int64_t(INT32_MAX) && vocab <= int64_t(INT32_MAX), "argmax_logprob: too large (S=", s,
               ", vocab=", vocab, ")");
  dispatch_float(logits.dtype(), "argmax_logprob", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool packed =
        (logits.dim(1) * int64_t(sizeof(T))) % 16 == 0 && reinterpret_cast<uintptr_t>(logits.data()) % 16 == 0;
    auto kernel = packed ? argmax_logprob_kernel<T, true> : argmax_logprob_kernel<T, false>;
    kernel<<<unsigned(s), kThreads, 0, stream_of(ctx)>>>(logits.data_as<T>(), logits.dim(1), vocab,
                                                         tokens.data_as<int32_t>(), logprobs.data_as<float>(),
                                                         maxes.defined() ? maxes.data_as<float>() : nullptr);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
