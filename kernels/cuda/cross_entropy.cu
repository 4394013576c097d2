// Fused softmax cross-entropy: one block per row of logits [N, Vp].
//   pass 1: read the row once with 16-byte loads, keeping an online (max, sum of exp) per thread;
//           merge over the block -> logsumexp -> loss.
//   pass 2 (forward_backward): write dlogits = (softmax - onehot) * grad_scale over the row.
// For the backward the row is kept in shared memory between the passes when it fits (a bf16 row of
// the GPT-2 vocabulary is 100 KB: two blocks per SM), so logits cross DRAM once in and once out;
// a longer row is re-read in pass 2, mostly from L2. The kernel must also keep up with DRAM in
// arithmetic: e^(x - max) is one MUFU op, exp2((x - max) log2 e) (the error scales with |x - max|,
// not |x|), and only the packs that reach past V check columns against it.
#include <math_constants.h>

#include <climits>

#include "kernels/cross_entropy.hpp"
#include "kernels/cuda/common.cuh"

namespace troupe::cuda {

namespace {
constexpr int kThreads = 512;
constexpr int kLoadsInFlight = 4;            // 16-byte loads a thread issues before consuming them
constexpr size_t kStaticSmemReserve = 1024;  // block_merge's table and the runtime's share
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// 2^x in one MUFU.EX2 (exp2f adds denormal handling); results below 2^-126 flush to zero.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax state of some logits: their max and the sum of e^(x - max).
// An empty state has max = -inf, sum = 0.
struct SoftmaxState {
  float max;
  float sum;
};

__device__ __forceinline__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return a;  // both empty
  return {m, a.sum * fast_exp2((a.max - m) * kLog2e) + b.sum * fast_exp2((b.max - m) * kLog2e)};
}

// Adds one pack of logits starting at column `col`. kMasked: the pack reaches past the vocabulary
// and columns >= vocab (padding) must not count.
template <bool kMasked, typename T>
__device__ __forceinline__ SoftmaxState absorb(SoftmaxState s, const Pack128<T>& p, int col, int vocab) {
  float x[Pack128<T>::size];
  float pack_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < Pack128<T>::size; ++k) {
    x[k] = !kMasked || col + k < vocab ? to_f32(p[k]) : -INFINITY;
    pack_max = fmaxf(pack_max, x[k]);
  }
  if (pack_max == -INFINITY) return s;  // all padding (or all -inf): nothing to add
  const float m = fmaxf(s.max, pack_max);
  float sum = s.sum * fast_exp2((s.max - m) * kLog2e);
#pragma unroll
  for (int k = 0; k < Pack128<T>::size; ++k) sum += fast_exp2((x[k] - m) * kLog2e);
  return {m, sum};
}

// What pass 2 needs to turn a logit into its gradient.
struct RowGradient {
  float max;       // of the row's logits
  float log2_sum;  // log2(sum_j e^(x_j - max))
  int target;
  int vocab;
  float grad_scale;
};

// dlogits for one pack starting at column `col`: (softmax - onehot) * grad_scale; kMasked as in absorb.
template <bool kMasked, typename T>
__device__ __forceinline__ Pack128<T> gradient(const Pack128<T>& p, int col, const RowGradient& r) {
  Pack128<T> g;
#pragma unroll
  for (int k = 0; k < Pack128<T>::size; ++k) {
    const float prob = fast_exp2((to_f32(p[k]) - r.max) * kLog2e - r.log2_sum);
    float d = (prob - (col + k == r.target ? 1.0f : 0.0f)) * r.grad_scale;
    if (kMasked && col + k >= r.vocab) d = 0.0f;
    g[k] = from_f32<T>(d);
  }
  return g;
}

// Merge over the block; every thread gets the result. Called once per block.
__device__ SoftmaxState block_merge(SoftmaxState s) {
  __shared__ SoftmaxState warp_states[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    s = merge(s, {__shfl_xor_sync(0xffffffffu, s.max, o), __shfl_xor_sync(0xffffffffu, s.sum, o)});
  if (lane == 0) warp_states[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < nwarps ? warp_states[lane] : SoftmaxState{-INFINITY, 0.0f};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      s = merge(s, {__shfl_xor_sync(0xffffffffu, s.max, o), __shfl_xor_sync(0xffffffffu, s.sum, o)});
    if (lane == 0) warp_states[0] = s;
  }
  __syncthreads();
  return warp_states[0];
}

// logits: [rows, padded_vocab] (padded_vocab a multiple of the pack size); targets, losses: [rows].
// A target of -1 gives loss 0 and a zero gradient row; any other target outside [0, vocab) gives
// NaN (loss and gradient) since a kernel cannot throw: the bad value shows in the loss.
template <typename T, bool kBackward, bool kCacheRow>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(T* logits, const int32_t* __restrict__ targets, int padded_vocab, int vocab, float grad_scale,
                         float* __restrict__ losses) {
  constexpr int kPack = Pack128<T>::size;
  extern __shared__ int4 dynamic_smem[];
  Pack128<T>* row_cache = reinterpret_cast<Pack128<T>*>(dynamic_smem);  // [padded_vocab / kPack] when kCacheRow
  const int64_t row = blockIdx.x;
  T* x = logits + row * padded_vocab;
  const int npacks = padded_vocab / kPack;
  const int target = targets[row];

  if (target < 0 || target >= vocab) {
    const float fill = target == -1 ? 0.0f : CUDART_NAN_F;
    if (threadIdx.x == 0) losses[row] = fill;
    if constexpr (kBackward) {
      Pack128<T> p;
#pragma unroll
      for (int k = 0; k < kPack; ++k) p[k] = from_f32<T>(fill);
      for (int i = threadIdx.x; i < npacks; i += kThreads) store128cs(x + i * kPack, p);
    }
    return;
  }

  // Read before block_merge's barrier: after it, pass 2 overwrites the row.
  const float target_logit = threadIdx.x == 0 ? to_f32(x[target]) : 0.0f;

  // Pass 1. Without the cache, the backward re-reads the row: load it through L2 (no streaming hint).
  SoftmaxState s{-INFINITY, 0.0f};
  for (int base = threadIdx.x; base < npacks; base += kThreads * kLoadsInFlight) {
    Pack128<T> p[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = base + u * kThreads;
      if (i < npacks) p[u] = kBackward && !kCacheRow ? load128(x + i * kPack) : load128cs(x + i * kPack);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = base + u * kThreads;
      if (i >= npacks) continue;
      if (kCacheRow) row_cache[i] = p[u];
      const int col = i * kPack;
      s = col + kPack <= vocab ? absorb<false>(s, p[u], col, vocab) : absorb<true>(s, p[u], col, vocab);
    }
  }
  s = block_merge(s);
  const float log2_sum = log2f(s.sum);  // log2(sum_j e^(x_j - max))
  if (threadIdx.x == 0) losses[row] = (s.max - target_logit) + log2_sum * kLn2;
  if constexpr (kBackward) {
    // Pass 2: dlogits = (softmax - onehot) * grad_scale, zero on the padding.
    const RowGradient r{s.max, log2_sum, target, vocab, grad_scale};
#pragma unroll 2
    for (int i = threadIdx.x; i < npacks; i += kThreads) {
      const Pack128<T> p = kCacheRow ? row_cache[i] : load128cs(x + i * kPack);
      const int col = i * kPack;
      store128cs(x + col, col + kPack <= vocab ? gradient<false>(p, col, r) : gradient<true>(p, col, r));
    }
  }
}

template <typename T, bool kBackward>
void launch_cross_entropy(const Context& ctx, const char* op, const Tensor& logits, const Tensor& targets,
                          int64_t vocab_size, float grad_scale, const Tensor& losses) {
  const int64_t rows = logits.dim(0), padded_vocab = logits.dim(1);
  TROUPE_CHECK(padded_vocab % Pack128<T>::size == 0, op, ": CUDA kernel needs Vp to be a multiple of ",
               Pack128<T>::size, ", got ", padded_vocab);
  TROUPE_CHECK(padded_vocab <= INT_MAX, op, ": Vp = ", padded_vocab, " is too large");
  TROUPE_CHECK(reinterpret_cast<uintptr_t>(logits.data()) % 16 == 0, op, ": logits must be 16-byte aligned");
  if (rows == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  const size_t cache_bytes = size_t(padded_vocab) * sizeof(T);
  if (kBackward && cache_bytes + kStaticSmemReserve <= ctx.cuda_state().smem_per_block_optin) {
    auto kernel = cross_entropy_kernel<T, true, true>;
    TROUPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cache_bytes)));
    kernel<<<unsigned(rows), kThreads, cache_bytes, stream>>>(logits.data_as<T>(), targets.data_as<int32_t>(),
                                                              int(padded_vocab), int(vocab_size), grad_scale,
                                                              losses.data_as<float>());
  } else {
    cross_entropy_kernel<T, kBackward, false>
        <<<unsigned(rows), kThreads, 0, stream>>>(logits.data_as<T>(), targets.data_as<int32_t>(), int(padded_vocab),
                                                  int(vocab_size), grad_scale, losses.data_as<float>());
  }
  TROUPE_CUDA_CHECK_LAUNCH();
}
}  // namespace

void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                           const Tensor& losses) {
  dispatch_float(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_cross_entropy<T, false>(ctx, "cross_entropy_forward", logits, targets, vocab_size, 1.0f, losses);
  });
}

void cross_entropy_forward_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                                    float grad_scale, const Tensor& losses) {
  dispatch_float(logits.dtype(), "cross_entropy_forward_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_cross_entropy<T, true>(ctx, "cross_entropy_forward_backward", logits, targets, vocab_size, grad_scale,
                                  losses);
  });
}

}  // namespace troupe::cuda
