// One block per row: each thread keeps a running (max, its first index, sum of exp(x - max))
// over a strided part of the row; warps, then the block, merge those triples.
#include "kernels/argmax.hpp"
#include "kernels/check.hpp"
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

template <typename T>
__global__ void argmax_logprob_kernel(const T* __restrict__ logits, int64_t vp, int64_t vocab,
                                      int32_t* __restrict__ tokens, float* __restrict__ logprobs,
                                      float* __restrict__ maxes) {
  const T* x = logits + int64_t(blockIdx.x) * vp;
  Running r{-INFINITY, 0, 0.0f};
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = to_f32(x[j]);
    if (r.sum == 0.0f) {
      r = {v, int(j), 1.0f};
    } else if (v > r.max) {  // strictly greater: the earlier index keeps a tie
      r.sum = r.sum * __expf(r.max - v) + 1.0f;
      r.max = v;
      r.index = int(j);
    } else {
      r.sum += __expf(v - r.max);
    }
  }
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
    argmax_logprob_kernel<T><<<unsigned(s), kThreads, 0, stream_of(ctx)>>>(
        logits.data_as<T>(), logits.dim(1), vocab, tokens.data_as<int32_t>(), logprobs.data_as<float>(),
        maxes.defined() ? maxes.data_as<float>() : nullptr);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
