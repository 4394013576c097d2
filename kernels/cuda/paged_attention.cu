// Paged attention on CUDA. Append: one thread per K and V element of a new token. Attention:
// one block per (query row, query head); each warp walks every kWarps-th tile of 32 keys of the
// row's context with an online softmax (f32): a lane per key for the scores, lanes splitting
// the head dimension for the values; the warps' partial results are merged at the end. Meant
// for decode (one row per sequence) and moderate prefills; the flash kernels in
// attention_flash_*.cu are the fast path for training.
#include "kernels/cuda/common.cuh"
#include "kernels/paged_attention.hpp"

namespace troupe::cuda {

namespace {
constexpr int kAppendThreads = 256;
constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 32 * kMaxPerLane
constexpr int kUnroll = 4;      // V rows loaded together

template <typename T>
__global__ void paged_kv_append_kernel(const T* __restrict__ qkv, const int32_t* __restrict__ slots,
                                       T* __restrict__ k_cache, T* __restrict__ v_cache, int64_t n, int64_t width,
                                       int64_t k_col, int64_t kv_width) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * kv_width) return;
  const int64_t row = idx / kv_width, c = idx % kv_width;
  const int64_t dst = int64_t(slots[row]) * kv_width + c;
  k_cache[dst] = qkv[row * width + k_col + c];
  v_cache[dst] = qkv[row * width + k_col + kv_width + c];
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const T* __restrict__ qkv, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                           const int32_t* __restrict__ query_start, const int32_t* __restrict__ seq_lens,
                           const int32_t* __restrict__ block_tables, T* __restrict__ out, int S, int max_blocks,
                           int H, int G, int D, int block_size, float scale) {
  __shared__ float q[32 * kMaxPerLane];
  __shared__ float part[kWarps][32 * kMaxPerLane];
  __shared__ float warp_m[kWarps], warp_l[kWarps];
  const int row = blockIdx.x, h = blockIdx.y, g = h / (H / G);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int s = last_not_above(query_start, S, row);
  const int pos = seq_lens[s] - (query_start[s + 1] - row);
  const int64_t width = int64_t(H + 2 * G) * D, kv_width = int64_t(G) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) q[i] = to_f32(qkv[row * width + int64_t(h) * D + i]) * scale;
  __syncthreads();

  const int32_t* table = block_tables + int64_t(s) * max_blocks;
  float m = -INFINITY, l = 0.0f, acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) acc[j] = 0.0f;
  // Tiles of 32 keys: lane i scores key base + i over the whole head dimension (its own K row,
  // 16-byte loads: 32 rows in flight at once), the warp updates its online softmax once per
  // tile, then the lanes, splitting the head dimension, add the tile's 32 V rows.
  for (int base = warp * 32; base <= pos; base += kWarps * 32) {
    const int k = base + lane;
    const bool valid = k <= pos;
    int64_t at = 0;
    float score = -INFINITY;
    if (valid) {
      at = (int64_t(table[k / block_size]) * block_size + k % block_size) * kv_width + int64_t(g) * D;
      float dot = 0.0f;
      if constexpr (kVec) {
        constexpr int P = Pack128<T>::size;
#pragma unroll 4
        for (int i = 0; i < D; i += P) {
          const Pack128<T> kv = load128(k_cache + at + i);
#pragma unroll
          for (int e = 0; e < P; ++e) dot += q[i + e] * to_f32(kv[e]);
        }
      } else {
        for (int i = 0; i < D; ++i) dot += q[i] * to_f32(k_cache[at + i]);
      }
      score = dot;
    }
    const float m_new = fmaxf(m, warp_max(score));  // finite: key `base` is valid
    const float p = valid ? __expf(score - m_new) : 0.0f, correction = __expf(m - m_new);
    l = l * correction + warp_sum(p);
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) acc[j] *= correction;
    // kUnroll keys at a time, their loads issued together. A lane past the context has p = 0
    // and at = 0 (block 0's first row: a valid, finite address), so it adds nothing.
    const int keys = min(32, pos - base + 1);
    for (int t0 = 0; t0 < keys; t0 += kUnroll) {
      float pt[kUnroll], v[kUnroll][kMaxPerLane];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        pt[u] = __shfl_sync(0xffffffffu, p, t0 + u);
        const int64_t at_t = __shfl_sync(0xffffffffu, at, t0 + u);
#pragma unroll
        for (int j = 0; j < kMaxPerLane; ++j) {
          const int i = lane + 32 * j;
          v[u][j] = i < D ? to_f32(v_cache[at_t + i]) : 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int j = 0; j < kMaxPerLane; ++j) acc[j] += pt[u] * v[u][j];
    }
    m = m_new;
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  __syncthreads();
  float m_all = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w)
    if (warp_l[w] > 0.0f) l_all += warp_l[w] * __expf(warp_m[w] - m_all);
  const float mine = l > 0.0f ? __expf(m - m_all) : 0.0f;  // a warp that saw no key adds nothing
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < D) part[warp][i] = acc[j] * mine;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += part[w][i];
    out[int64_t(row) * H * D + int64_t(h) * D + i] = from_f32<T>(sum / l_all);
  }
}
}  // namespace

void paged_kv_append(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots,
                     const Tensor& k_cache, const Tensor& v_cache) {
  const int64_t n = qkv.dim(0), kv_width = int64_t(cfg.n_kv_heads) * cfg.head_dim;
  if (n == 0) return;
  dispatch_float(qkv.dtype(), "paged_kv_append", [&](auto tag) {
    using T = typename decltype(tag)::type;
    paged_kv_append_kernel<T><<<ceil_div(n * kv_width, kAppendThreads), kAppendThreads, 0, stream_of(ctx)>>>(
        qkv.data_as<T>(), slots.data_as<int32_t>(), k_cache.data_as<T>(), v_cache.data_as<T>(), n, qkv.dim(1),
        int64_t(cfg.n_heads) * cfg.head_dim, kv_width);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void paged_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const PagedBatch& batch,
                     const Tensor& k_cache, const Tensor& v_cache, const Tensor& out) {
  TROUPE_CHECK(cfg.head_dim <= 32 * kMaxPerLane, "paged_attention: CUDA supports head_dim up to ", 32 * kMaxPerLane,
               ", got ", cfg.head_dim);
  const int64_t n = qkv.dim(0);
  if (n == 0) return;
  TROUPE_CHECK(n <= int64_t(INT32_MAX) && cfg.n_heads <= 65535, "paged_attention: grid too large (N=", n,
               ", H=", cfg.n_heads, ")");
  const float scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / sqrtf(float(cfg.head_dim));
  const dim3 grid(unsigned(n), unsigned(cfg.n_heads));
  dispatch_float(qkv.dtype(), "paged_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // 16-byte K loads when every K row of a head starts 16-byte aligned.
    const bool vec = (int64_t(cfg.head_dim) * int64_t(sizeof(T))) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(k_cache.data()) % 16 == 0;
    auto kernel = vec ? paged_attention_kernel<T, true> : paged_attention_kernel<T, false>;
    kernel<<<grid, kWarps * 32, 0, stream_of(ctx)>>>(
        qkv.data_as<T>(), k_cache.data_as<T>(), v_cache.data_as<T>(), batch.query_start.data_as<int32_t>(),
        batch.seq_lens.data_as<int32_t>(), batch.block_tables.data_as<int32_t>(), out.data_as<T>(),
        int(batch.seq_lens.dim(0)), int(batch.block_tables.dim(1)), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
        cfg.block_size, scale);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
