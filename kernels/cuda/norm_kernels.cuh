// Device kernels of LayerNorm and RMSNorm (launchers in norm.cu). RMSNorm is LayerNorm
// without centering (mean taken as 0) and without bias: one kernel serves both, with
// kCentered selecting the LayerNorm terms.
//
// Row layout: a *group* of `group` threads handles one row of C elements, thread g of the
// group owning the 16-byte packs g, g + group, ..., g + (kPacks - 1) * group (those below
// C / pack size).
//   group == 32:            a warp per row, several rows per block, shuffle reductions.
//   group == blockDim.x:    a block per row (wide rows), reductions through shared memory.
// Both passes launch no more blocks than fit on the GPU at once; each group walks rows a grid
// apart. Since a thread owns the same columns in every row it visits, the backward accumulates
// its share of dw/db over all its rows (in shared memory in warp mode, in registers in block
// mode) and writes one partial sum per block. Forward keeps the thread's packs of x in registers
// (x is read from memory once) and loads the next row's before reducing this one; backward reads
// x and dy twice (the second time from L1). Either way a row costs one round trip to memory.
// Rows are found through a RowMap: plain [rows, C] tensors, or the per-head norms' rows of D
// values a head apart inside a fused activation (q and k heads of a [N, (H + 2G) * D] qkv).
// Forward can also write the e4m3 cast of y (as stored) and fold |y| into an amax (kFp8): the
// FP8 linear that y feeds then needs no pass of its own over y.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_convert.cuh"

namespace troupe::cuda::norm {

// Tuning constants.
constexpr int kWarpModeThreads = 256;  // block size when a warp handles a row
constexpr int kMaxPacksPerThread = 4;  // register budget per thread for one row
constexpr int kMaxGroupThreads = 512;  // widest block-per-row group: C <= 512 * 4 * 8 (16-bit)
constexpr int kFinishSlices = 32;      // threads summing one column of the per-block partials

// Where row `row` of c values starts: rows come in groups of `per` contiguous rows (one token's
// heads), groups `stride` elements apart. Plain [rows, c]: per 1, stride c.
struct RowMap {
  int64_t stride;
  int per;
  __device__ __forceinline__ int64_t operator()(int64_t row, int c) const {
    return per == 1 ? row * stride : (row / per) * stride + (row % per) * c;
  }
};

// `group` is uniform over the block: the branches below cannot split a block at a barrier.
__device__ __forceinline__ float group_sum(float v, int group) { return group == 32 ? warp_sum(v) : block_sum(v); }

// a, b = their sums over the group: in block mode one shared-memory round for both.
__device__ __forceinline__ void group_sum2(float& a, float& b, int group) {
  a = warp_sum(a);
  b = warp_sum(b);
  if (group == 32) return;
  __shared__ float2 warp_sums[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  __syncthreads();  // every thread has read the previous call's warp_sums
  if (lane == 0) warp_sums[warp] = make_float2(a, b);
  __syncthreads();
  const float2 v = lane < nwarps ? warp_sums[lane] : make_float2(0.0f, 0.0f);
  a = warp_sum(v.x);
  b = warp_sum(v.y);
}

// Loads thread g's packs of row `row` (rows of c at m).
template <typename T, int kPacks>
__device__ __forceinline__ void load_row(Pack128<T> (&to)[kPacks], const T* base, RowMap m, int64_t row, int c, int g,
                                         int group) {
  constexpr int P = Pack128<T>::size;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = g + k * group;
    if (p < c / P) to[k] = load128cs(base + m(row, c) + p * P);
  }
}

// x, y: rows of c (at xm, ym); w, b: [c] (b nullable); mean (if kCentered), rstd: f32 [rows].
// y may be x (in place): a thread reads its packs of a row before it writes them. kFp8: y's FP8
// side output (fp8.q laid out as y).
// The grid is at most as large as fits on the GPU at once, and each group walks its rows with the
// next row's x loaded before this row's reductions, so that a load is always in flight (a group
// per row, the grid as large as the rows, ran at 1.1-1.8 TB/s on an H100; this at 2.4-2.6).
template <typename T, int kPacks, bool kCentered, bool kFp8>
__global__ void __launch_bounds__(kMaxGroupThreads)
    forward_kernel(const T* x, RowMap xm, const T* __restrict__ w, const T* __restrict__ b, float eps, T* y, RowMap ym,
                   float* __restrict__ mean, float* __restrict__ rstd, int64_t rows, int c, int group,
                   Fp8SidePtrs fp8) {
  constexpr int P = Pack128<T>::size;
  const int packs = c / P, g = threadIdx.x % group, rows_per_block = blockDim.x / group;
  const int64_t stride = int64_t(gridDim.x) * rows_per_block;
  const float inv_c = 1.0f / float(c);
  const float q_scale = kFp8 && fp8.q ? *fp8.scale : 0.0f;
  unsigned best = 0;  // kFp8: the bits of the largest |y| this thread wrote
  int64_t row = int64_t(blockIdx.x) * rows_per_block + threadIdx.x / group;
  Pack128<T> xs[kPacks];
  if (row < rows) load_row(xs, x, xm, row, c, g, group);
  for (; row < rows; row += stride) {  // the same trip count for a whole block in block mode
    Pack128<T> next[kPacks];
    if (row + stride < rows) load_row(next, x, xm, row + stride, c, g, group);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (g + k * group >= packs) continue;
#pragma unroll
      for (int i = 0; i < P; ++i) sum += to_f32(xs[k][i]);
    }
    const float mu = kCentered ? group_sum(sum, group) * inv_c : 0.0f;
    // Variance about the mean from the registers: a second pass costs no memory traffic.
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (g + k * group >= packs) continue;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const float d = to_f32(xs[k][i]) - mu;
        sq += d * d;
      }
    }
    const float s = rsqrtf(group_sum(sq, group) * inv_c + eps);
    if (g == 0) {
      if (kCentered) mean[row] = mu;
      rstd[row] = s;
    }
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = g + k * group;
      if (p >= packs) continue;
      // w and b are the same for every row: L1 hits, read here rather than held in registers.
      const Pack128<T> wk = load128(w + p * P);
      Pack128<T> bk, out;
      if (b) bk = load128(b + p * P);
#pragma unroll
      for (int i = 0; i < P; ++i)
        out[i] = from_f32<T>((to_f32(xs[k][i]) - mu) * s * to_f32(wk[i]) + (b ? to_f32(bk[i]) : 0.0f));
      store128(y + ym(row, c) + p * P, out);
      if constexpr (kFp8) fp8_side_pack(out, fp8, q_scale, ym(row, c) + p * P, best);
      xs[k] = next[k];
    }
  }
  if constexpr (kFp8)
    if (fp8.amax) amax_commit(best, fp8.amax);  // every thread of the block gets here
}

// The backward's running column sums of dy * xhat (for dw) and dy (for db), over a thread's rows.
// In registers: block mode, where a thread owns its columns for the whole launch.
template <int kPacks, int P>
struct RegisterSums {
  float w[kPacks][P] = {}, b[kPacks][P] = {};
  __device__ __forceinline__ void add(int k, int /*p*/, const float (&dw)[P], const float (&db)[P]) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      w[k][i] += dw[i];
      b[k][i] += db[i];
    }
  }
};

// In shared memory: warp mode, a slice of c floats per plane for each warp. The registers stay
// free for the rows' data, so that more warps fit on an SM (GPT-2 350M's C = 1024: 1.37x faster
// than register sums on an H100).
template <int P, bool kCentered>
struct SharedSums {
  float* w;  // this warp's [c] dw slice
  float* b;  // and its db slice (kCentered)
  __device__ __forceinline__ static void add4(float* to, const float* v) {
    float4& t = *reinterpret_cast<float4*>(to);
    t = make_float4(t.x + v[0], t.y + v[1], t.z + v[2], t.w + v[3]);
  }
  __device__ __forceinline__ void add(int /*k*/, int p, const float (&dw)[P], const float (&db)[P]) {
    static_assert(P % 4 == 0, "16-byte packs hold a multiple of four floats' worth of columns");
#pragma unroll
    for (int i = 0; i < P; i += 4) {
      add4(w + p * P + i, dw + i);
      if constexpr (kCentered) add4(b + p * P + i, db + i);
    }
  }
};

// One row for thread g of its group: dx (+)= rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat *
// xhat)), dxhat = dy * w (the mean(dxhat) term only when kCentered), and the row's dw/db terms
// into sums. Pass 1 reads x and dy; pass 2 reads them again (L1 hits) with dx_in (kAccumulate)
// and writes dx. dx may be dy or dx_in: a thread reads its packs of a row before it writes them.
template <typename T, int kPacks, bool kCentered, bool kAccumulate, typename Sums>
__device__ __forceinline__ void backward_row(const T* dyr, const T* xr, const T* __restrict__ w, float mu, float s,
                                             const T* dx_inr, T* dxr, int c, int g, int group, Sums& sums) {
  constexpr int P = Pack128<T>::size;
  const int packs = c / P;
  const float inv_c = 1.0f / float(c);
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = g + k * group;
    if (p >= packs) continue;
    const Pack128<T> xk = load128(xr + p * P), dyk = load128(dyr + p * P), wk = load128(w + p * P);
    float dw[P], db[P];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float d = to_f32(dyk[i]), xhat = (to_f32(xk[i]) - mu) * s, dxhat = d * to_f32(wk[i]);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      dw[i] = d * xhat;
      db[i] = d;
    }
    sums.add(k, p, dw, db);
  }
  group_sum2(sum_dxhat, sum_dxhat_xhat, group);
  const float mean_dxhat = kCentered ? sum_dxhat * inv_c : 0.0f, mean_dxhat_xhat = sum_dxhat_xhat * inv_c;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = g + k * group;
    if (p >= packs) continue;
    // The last use of x, dy and dx_in: streaming loads.
    const Pack128<T> xk = load128cs(xr + p * P), dyk = load128cs(dyr + p * P), wk = load128(w + p * P);
    Pack128<T> in, out;
    if constexpr (kAccumulate) in = load128cs(dx_inr + p * P);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float xhat = (to_f32(xk[i]) - mu) * s, dxhat = to_f32(dyk[i]) * to_f32(wk[i]);
      float grad = s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      if constexpr (kAccumulate) grad += to_f32(in[i]);
      out[i] = from_f32<T>(grad);
    }
    store128(dxr + p * P, out);
  }
}

// The backward over rows; kAccumulate adds dx_in's row to dx (dx_in may be dx: in place), else dx
// is overwritten. dy, dx_in and dx rows at dym, x rows at xm; mean (kCentered), rstd: f32 [rows].
// partial: f32 [planes, gridDim.x, c], plane 0 the block's sum of dy * xhat over its rows, plane 1
// (kCentered) its sum of dy; finish_param_grads_kernel adds them up.
//
// Warp mode (group 32, blockDim.x kWarpModeThreads): the column sums go through dynamic shared
// memory, [warps][planes][c] floats, added over the warps in order at the end (no atomics).
template <typename T, int kPacks, bool kCentered, bool kAccumulate>
__global__ void __launch_bounds__(kWarpModeThreads, 2)
    backward_warp_kernel(const T* dy, RowMap dym, const T* __restrict__ x, RowMap xm, const T* __restrict__ w,
                         const float* __restrict__ mean, const float* __restrict__ rstd, const T* dx_in, T* dx,
                         float* __restrict__ partial, int64_t rows, int c) {
  extern __shared__ float4 sums_smem[];  // float4: 16-byte aligned
  constexpr int P = Pack128<T>::size, kPlanes = kCentered ? 2 : 1;
  const int g = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float* const all = reinterpret_cast<float*>(sums_smem);
  SharedSums<P, kCentered> sums{all + int64_t(warp) * kPlanes * c, all + (int64_t(warp) * kPlanes + 1) * c};
  for (int j = g; j < kPlanes * c; j += 32) sums.w[j] = 0.0f;  // this warp's slices (b follows w)
  __syncwarp();
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < rows; row += int64_t(gridDim.x) * warps)
    backward_row<T, kPacks, kCentered, kAccumulate>(dy + dym(row, c), x + xm(row, c), w, kCentered ? mean[row] : 0.0f,
                                                    rstd[row], dx_in + dym(row, c), dx + dym(row, c), c, g, 32, sums);
  __syncthreads();
  for (int j = threadIdx.x; j < c; j += blockDim.x)
    for (int plane = 0; plane < kPlanes; ++plane) {
      float total = 0.0f;
      for (int v = 0; v < warps; ++v) total += all[(int64_t(v) * kPlanes + plane) * c + j];
      partial[(int64_t(plane) * gridDim.x + blockIdx.x) * c + j] = total;
    }
}

// Block mode (group == blockDim.x: a block per row, wide rows): a thread owns its columns, so its
// column sums stay in registers and go to `partial` directly.
template <typename T, int kPacks, bool kCentered, bool kAccumulate>
__global__ void __launch_bounds__(kMaxGroupThreads)
    backward_block_kernel(const T* dy, RowMap dym, const T* __restrict__ x, RowMap xm, const T* __restrict__ w,
                          const float* __restrict__ mean, const float* __restrict__ rstd, const T* dx_in, T* dx,
                          float* __restrict__ partial, int64_t rows, int c) {
  constexpr int P = Pack128<T>::size;
  const int g = threadIdx.x, packs = c / P;
  RegisterSums<kPacks, P> sums;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
    backward_row<T, kPacks, kCentered, kAccumulate>(dy + dym(row, c), x + xm(row, c), w, kCentered ? mean[row] : 0.0f,
                                                    rstd[row], dx_in + dym(row, c), dx + dym(row, c), c, g,
                                                    int(blockDim.x), sums);
  float* part_w = partial + int64_t(blockIdx.x) * c;
  float* part_b = partial + int64_t(gridDim.x + blockIdx.x) * c;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = g + k * int(blockDim.x);
    if (p >= packs) continue;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      part_w[p * P + i] = sums.w[k][i];
      if constexpr (kCentered) part_b[p * P + i] = sums.b[k][i];
    }
  }
}

// dw[j] += sum over parts of partial[0][part][j]; db[j] (when blockIdx.y == 1) likewise from
// plane 1. Block (32 columns, kFinishSlices), grid (ceil(c / 32), planes). Fixed order: deterministic.
__global__ void __launch_bounds__(32 * kFinishSlices)
    finish_param_grads_kernel(const float* __restrict__ partial, int parts, int c, float* __restrict__ dw,
                              float* __restrict__ db) {
  __shared__ float slice_sums[kFinishSlices][33];  // 33: no bank conflicts on the column-wise read
  const int j = blockIdx.x * 32 + threadIdx.x, plane = blockIdx.y;
  float sum = 0.0f;
  if (j < c)
    for (int part = threadIdx.y; part < parts; part += kFinishSlices)
      sum += partial[(int64_t(plane) * parts + part) * c + j];
  slice_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || j >= c) return;
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < kFinishSlices; ++s) total += slice_sums[s][threadIdx.x];
  (plane == 0 ? dw : db)[j] += total;
}

}  // namespace troupe::cuda::norm
