// Paged attention on CUDA. Append: one thread per K and V element of a new token. Attention:
// one block per (query row, query head); each warp walks every warps-th tile of 32 keys of the
// row's context with an online softmax (f32): a lane per key for the scores, then the tile's V
// rows; the warps' partial results are merged at the end. Under a sliding window the tiles start
// at the window's left edge: O(W) work per row, and blocks before it are never looked up.
// Where a V row is a power-of-two number of 16-byte chunks (bf16/f16 D = 8..256, f32 D =
// 4..128), lanes take (key, chunk) pairs and a tile's V rows are read with one batch of
// independent 16-byte loads per lane; otherwise lanes split the head dimension and read a few
// rows at a time. Meant for decode (one row per sequence) and moderate prefills; the flash
// kernels in attention_flash_*.cu are the fast path for training.
//
// The fused append (paged_append_attention): the keys of this forward's own rows are read from
// qkv, not the cache, and the block of each row's first query head of a group writes that row's
// K and V into the cache; no block reads a slot written in the same launch. A decode step so
// spends one launch a layer on attention, not two.
//
// Warps a block: a thread needs about 108 registers (bf16, 16-byte loads), so an SM holds 2
// blocks of 8 warps, 4 of 4 or 9 of 2. A small grid (few sequences) gets 8 warps, which share a
// row's long context; a large one gets fewer, so the grid runs in one wave. GPT-2 124M decode at
// batch 64 on an H100: 0.768 ms a step with 8 warps, 0.676 with 2 (0.738 before the fused
// append); at batch 16, 8 is best (bench/results/2026-11-27-session22.md).
//
// The kernel may start while the one before it (qkv's GEMV at decode) finishes: it reads the
// batch's metadata first and waits for the prior grid before reading qkv
// (kernels/cuda/dependent_launch.cuh); it lets the next kernel start once its tiles are done.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/paged_attention.hpp"

namespace troupe::cuda {

namespace {
constexpr int kAppendThreads = 256;
constexpr int kMaxWarps = 8;
constexpr int kMaxPerLane = 8;    // head_dim <= 32 * kMaxPerLane
constexpr int kUnroll = 4;        // V rows loaded together (scalar path)
constexpr int kRowsPerBatch = 8;  // V loads in flight per lane (chunked path)

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

// Lane `from`'s pointer, for every lane of the warp.
template <typename T>
__device__ __forceinline__ const T* shfl_pointer(const T* p, int from) {
  return reinterpret_cast<const T*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(p), from));
}

// kChunked: V rows of D / P 16-byte chunks (P = elements per chunk), D / P a power of two <= 32;
// lane = key group * chunks + chunk. Else lanes split the head dimension (any D <= 256).
// kAppend: the fused append (see the top); slots and the cache_out pointers are used only then
// (cache_out: the caches, written at this launch's slots only, which no block reads).
template <typename T, bool kChunked, bool kAppend>
__global__ void __launch_bounds__(kMaxWarps * 32)
    paged_attention_kernel(const T* __restrict__ qkv, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                           const int32_t* __restrict__ query_start, const int32_t* __restrict__ seq_lens,
                           const int32_t* __restrict__ block_tables, const int32_t* __restrict__ slots, T* k_cache_out,
                           T* v_cache_out, T* __restrict__ out, int S, int max_blocks, int H, int G, int D,
                           int block_size, int window, float scale) {
  constexpr int P = Pack128<T>::size;
  __shared__ float q[32 * kMaxPerLane];
  __shared__ float part[kMaxWarps][32 * kMaxPerLane];
  __shared__ float warp_m[kMaxWarps], warp_l[kMaxWarps];
  const int row = blockIdx.x, h = blockIdx.y, g = h / (H / G);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = int(blockDim.x) / 32;
  // A decode batch's row r is sequence r (every earlier sequence has one row): no search.
  const int s = row < S && query_start[row] == row ? row : last_not_above(query_start, S, row);
  const int row_first = query_start[s], first_new = seq_lens[s] - (query_start[s + 1] - row_first);
  const int pos = first_new + (row - row_first);
  const int first = window > 0 && pos >= window ? pos - window + 1 : 0;  // first key in the window
  const int64_t width = int64_t(H + 2 * G) * D, kv_width = int64_t(G) * D;
  wait_for_prior_grids();  // qkv comes from the kernel before (the batch's metadata from earlier work)
  for (int i = threadIdx.x; i < D; i += blockDim.x) q[i] = to_f32(qkv[row * width + int64_t(h) * D + i]) * scale;
  if (kAppend && h % (H / G) == 0) {  // this row's K and V of group g into its slot
    const T* src = qkv + row * width + int64_t(H + g) * D;
    const int64_t dst = int64_t(slots[row]) * kv_width + int64_t(g) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
      k_cache_out[dst + i] = src[i];
      v_cache_out[dst + i] = src[kv_width + i];
    }
  }
  __syncthreads();

  // Chunked path: this lane's chunk of the V rows and its first key of a tile (keys kg, kg + groups, ...).
  const int chunks = kChunked ? D / P : 1, groups = kChunked ? 32 / chunks : 1;
  const int chunk = lane % chunks, kg = lane / chunks;
  const int32_t* table = block_tables + int64_t(s) * max_blocks;
  float m = -INFINITY, l = 0.0f, acc[kMaxPerLane];  // acc: dims lane + 32 j, or chunk * P + j
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) acc[j] = 0.0f;
  for (int base = first + warp * 32; base <= pos; base += warps * 32) {
    // Scores: lane i takes key base + i over the whole head dimension. kp, vp: its K and V rows
    // (an invalid lane's: block 0's first row, a valid, finite address).
    const int k = base + lane;
    const bool valid = k <= pos;
    const T *kp = k_cache, *vp = v_cache;
    float score = -INFINITY;
    if (valid) {
      if (kAppend && k >= first_new) {  // a row of this launch: its K and V in qkv
        kp = qkv + int64_t(row_first + k - first_new) * width + int64_t(H + g) * D;
        vp = kp + kv_width;
      } else {
        const int64_t at = (int64_t(table[k / block_size]) * block_size + k % block_size) * kv_width + int64_t(g) * D;
        kp = k_cache + at;
        vp = v_cache + at;
      }
      float dot = 0.0f;
      if constexpr (kChunked) {
#pragma unroll 4
        for (int i = 0; i < D; i += P) {
          const Pack128<T> kv = load128(kp + i);
#pragma unroll
          for (int e = 0; e < P; ++e) dot += q[i + e] * to_f32(kv[e]);
        }
      } else {
        for (int i = 0; i < D; ++i) dot += q[i] * to_f32(kp[i]);
      }
      score = dot;
    }
    const float m_new = fmaxf(m, warp_max(score));  // finite: key `base` is valid
    const float p = valid ? __expf(score - m_new) : 0.0f, correction = __expf(m - m_new);
    l = l * correction + warp_sum(p);
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) acc[j] *= correction;
    const int keys = min(32, pos - base + 1);  // warp-uniform
    if constexpr (kChunked) {
      // kRowsPerBatch rows per lane per batch, their loads issued together.
      for (int first = 0; first < keys; first += kRowsPerBatch * groups) {
        Pack128<T> v[kRowsPerBatch];
        float pt[kRowsPerBatch];
#pragma unroll
        for (int u = 0; u < kRowsPerBatch; ++u) {
          const int t = first + kg + u * groups;
          pt[u] = __shfl_sync(0xffffffffu, p, t & 31);
          const T* vp_t = shfl_pointer(vp, t & 31);
          if (t < keys) {
            v[u] = load128(vp_t + chunk * P);
          } else {
            pt[u] = 0.0f;
#pragma unroll
            for (int e = 0; e < P; ++e) v[u][e] = from_f32<T>(0.0f);
          }
        }
#pragma unroll
        for (int u = 0; u < kRowsPerBatch; ++u)
#pragma unroll
          for (int e = 0; e < P; ++e) acc[e] += pt[u] * to_f32(v[u][e]);
      }
    } else {
      // kUnroll keys at a time. A lane past the context has p = 0 and block 0's first row (a
      // valid, finite address), so it adds nothing.
      for (int t0 = 0; t0 < keys; t0 += kUnroll) {
        float pt[kUnroll], v[kUnroll][kMaxPerLane];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          pt[u] = __shfl_sync(0xffffffffu, p, t0 + u);
          const T* vp_t = shfl_pointer(vp, t0 + u);
#pragma unroll
          for (int j = 0; j < kMaxPerLane; ++j) {
            const int i = lane + 32 * j;
            v[u][j] = i < D ? to_f32(vp_t[i]) : 0.0f;
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int j = 0; j < kMaxPerLane; ++j) acc[j] += pt[u] * v[u][j];
      }
    }
    m = m_new;
  }
  if constexpr (kChunked) {  // sum the key groups: lanes of group 0 hold the warp's chunk sums
    for (int offset = chunks; offset < 32; offset *= 2)
#pragma unroll
      for (int e = 0; e < P; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], offset);
  }
  allow_dependent_launch();  // what is left is the merge: the next kernel may start its weight loads
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  __syncthreads();
  float m_all = -INFINITY;
  for (int w = 0; w < warps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  for (int w = 0; w < warps; ++w)
    if (warp_l[w] > 0.0f) l_all += warp_l[w] * __expf(warp_m[w] - m_all);
  const float mine = l > 0.0f ? __expf(m - m_all) : 0.0f;  // a warp that saw no key adds nothing
  if constexpr (kChunked) {
    if (kg == 0)
#pragma unroll
      for (int e = 0; e < P; ++e) part[warp][chunk * P + e] = acc[e] * mine;
  } else {
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < D) part[warp][i] = acc[j] * mine;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < warps; ++w) sum += part[w][i];
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

namespace {

// Warps a block of a grid of `blocks`: see the top of the file.
int block_warps(const Context& ctx, int64_t blocks) {
  const int64_t sms = ctx.cuda_state().sm_count;
  return blocks <= 2 * sms ? kMaxWarps : blocks <= 4 * sms ? 4 : 2;
}

// The attention kernel's pointers and sizes.
template <typename T>
struct PagedArgs {
  const T* qkv;
  T *k_cache, *v_cache;  // read by every launch, written by the fused append's
  const int32_t *query_start, *seq_lens, *block_tables, *slots;
  T* out;
  int sequences, max_blocks;
  float scale;
};

// One launch, started early (kernels/cuda/dependent_launch.cuh) where it may be.
template <typename T, bool kChunked, bool kAppend>
void launch(const Context& ctx, dim3 grid, int warps, const PagedAttentionConfig& cfg, const PagedArgs<T>& a) {
  const auto kernel = paged_attention_kernel<T, kChunked, kAppend>;
  static const bool waits = waits_for_prior_grids(reinterpret_cast<const void*>(kernel));  // per instance
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(warps * 32));
  config.stream = stream_of(ctx);
  cudaLaunchAttribute early{};
  allow_early_start(config, early, waits);
  // The caches go in twice: read through the const pointers, written (kAppend) through the
  // others, at slots no block reads.
  const T *k_read = a.k_cache, *v_read = a.v_cache;
  TROUPE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a.qkv, k_read, v_read, a.query_start, a.seq_lens,
                                       a.block_tables, a.slots, a.k_cache, a.v_cache, a.out, a.sequences, a.max_blocks,
                                       cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.block_size, cfg.window, a.scale));
}

// The attention launch, with the fused append when slots is defined.
void launch_paged_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg,
                            const PagedBatch& batch, const Tensor& slots, const Tensor& k_cache, const Tensor& v_cache,
                            const Tensor& out) {
  TROUPE_CHECK(cfg.head_dim <= 32 * kMaxPerLane, "paged_attention: CUDA supports head_dim up to ", 32 * kMaxPerLane,
               ", got ", cfg.head_dim);
  const int64_t n = qkv.dim(0);
  if (n == 0) return;
  TROUPE_CHECK(n <= int64_t(INT32_MAX) && cfg.n_heads <= 65535, "paged_attention: grid too large (N=", n,
               ", H=", cfg.n_heads, ")");
  const dim3 grid(unsigned(n), unsigned(cfg.n_heads));
  const float scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / sqrtf(float(cfg.head_dim));
  const int warps = block_warps(ctx, n * cfg.n_heads);
  const bool append = slots.defined();
  dispatch_float(qkv.dtype(), "paged_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // 16-byte loads when every K and V row of a head starts 16-byte aligned and is a power of
    // two number of chunks (at most one per lane). qkv's rows too, under the fused append.
    const int64_t bytes = int64_t(cfg.head_dim) * int64_t(sizeof(T)), chunks = bytes / 16;
    const bool chunked = bytes % 16 == 0 && chunks <= 32 && (chunks & (chunks - 1)) == 0 &&
                         reinterpret_cast<uintptr_t>(k_cache.data()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(v_cache.data()) % 16 == 0 &&
                         (!append || reinterpret_cast<uintptr_t>(qkv.data()) % 16 == 0);
    const PagedArgs<T> args{qkv.data_as<T>(),
                            k_cache.data_as<T>(),
                            v_cache.data_as<T>(),
                            batch.query_start.data_as<int32_t>(),
                            batch.seq_lens.data_as<int32_t>(),
                            batch.block_tables.data_as<int32_t>(),
                            append ? slots.data_as<int32_t>() : nullptr,
                            out.data_as<T>(),
                            int(batch.seq_lens.dim(0)),
                            int(batch.block_tables.dim(1)),
                            scale};
    if (chunked) {
      append ? launch<T, true, true>(ctx, grid, warps, cfg, args) : launch<T, true, false>(ctx, grid, warps, cfg, args);
    } else {
      append ? launch<T, false, true>(ctx, grid, warps, cfg, args)
             : launch<T, false, false>(ctx, grid, warps, cfg, args);
    }
  });
}

}  // namespace

void paged_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const PagedBatch& batch,
                     const Tensor& k_cache, const Tensor& v_cache, const Tensor& out) {
  launch_paged_attention(ctx, qkv, cfg, batch, Tensor(), k_cache, v_cache, out);
}

void paged_append_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots,
                            const PagedBatch& batch, const Tensor& k_cache, const Tensor& v_cache, const Tensor& out) {
  launch_paged_attention(ctx, qkv, cfg, batch, slots, k_cache, v_cache, out);
}

}  // namespace troupe::cuda
