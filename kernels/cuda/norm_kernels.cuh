// Device kernels of LayerNorm and RMSNorm (launchers in norm.cu). RMSNorm is LayerNorm
// without centering (mean taken as 0) and without bias: one kernel serves both, with
// kCentered selecting the LayerNorm terms.
//
// Row layout: a *group* of `group` threads handles one row of C elements, thread g of the
// group owning the 16-byte packs g, g + group, ..., g + (kPacks - 1) * group (those below
// C / pack size).
//   group == 32:            a warp per row, several rows per block, shuffle reductions.
//   group == blockDim.x:    a block per row (wide rows), reductions through shared memory.
// Since a thread owns the same columns in every row it visits, the backward accumulates
// its share of dw/db in registers over all its rows and writes one partial sum per block.
// Forward keeps the thread's packs of x in registers (x is read from memory once); backward
// keeps the dw/db accumulators there instead and reads x and dy twice (the second time
// from L1). Either way a row costs one round trip to memory.
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

// x, y: rows of c (at xm, ym); w, b: [c] (b nullable); mean (if kCentered), rstd: f32 [rows].
// y may be x (in place): a thread reads its packs of a row before it writes them. kFp8: y's FP8
// side output (fp8.q laid out as y).
template <typename T, int kPacks, bool kCentered, bool kFp8>
__global__ void __launch_bounds__(kMaxGroupThreads)
    forward_kernel(const T* x, RowMap xm, const T* __restrict__ w, const T* __restrict__ b, float eps, T* y, RowMap ym,
                   float* __restrict__ mean, float* __restrict__ rstd, int64_t rows, int c, int group,
                   Fp8SidePtrs fp8) {
  constexpr int P = Pack128<T>::size;
  const int packs = c / P, g = threadIdx.x % group, rows_per_block = blockDim.x / group;
  const float inv_c = 1.0f / float(c);
  const float q_scale = kFp8 && fp8.q ? *fp8.scale : 0.0f;
  unsigned best = 0;  // kFp8: the bits of the largest |y| this thread wrote
  for (int64_t row = int64_t(blockIdx.x) * rows_per_block + threadIdx.x / group; row < rows;
       row += int64_t(gridDim.x) * rows_per_block) {
    // With few packs per thread the weights are loaded beside x, so their latency overlaps
    // x's and the reductions' (a decode step's norms are one row: latency is all there is).
    constexpr bool kEarly = kPacks <= 4;
    Pack128<T> xs[kPacks], ws[kEarly ? kPacks : 1], bs[kEarly ? kPacks : 1];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = g + k * group;
      if (p >= packs) continue;
      xs[k] = load128cs(x + xm(row, c) + p * P);
      if constexpr (kEarly) {
        ws[k] = load128(w + p * P);
        if (b) bs[k] = load128(b + p * P);
      }
    }
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
      Pack128<T> wk, bk, out;
      if constexpr (kEarly) {
        wk = ws[k];
        if (b) bk = bs[k];
      } else {
        wk = load128(w + p * P);
        if (b) bk = load128(b + p * P);
      }
#pragma unroll
      for (int i = 0; i < P; ++i)
        out[i] = from_f32<T>((to_f32(xs[k][i]) - mu) * s * to_f32(wk[i]) + (b ? to_f32(bk[i]) : 0.0f));
      store128(y + ym(row, c) + p * P, out);
      if constexpr (kFp8) fp8_side_pack(out, fp8, q_scale, ym(row, c) + p * P, best);
    }
  }
  if constexpr (kFp8)
    if (fp8.amax) amax_commit(best, fp8.amax);  // every thread of the block gets here
}

// dx (+)= rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * w
// (the mean(dxhat) term only when kCentered); kAccumulate adds dx_in's row to it (dx_in may be
// dx: in place), else dx is overwritten. dy, dx_in and dx rows at dym, x rows at xm. dx is not
// __restrict__: a caller may hand in dy or dx_in as dx (a thread reads its packs before it writes
// them). partial: f32 [planes, gridDim.x, c], plane 0
// the block's sum of dy * xhat over its rows, plane 1 (kCentered) its sum of dy.
template <typename T, int kPacks, bool kCentered, bool kAccumulate>
__global__ void __launch_bounds__(kMaxGroupThreads)
    backward_kernel(const T* dy, RowMap dym, const T* __restrict__ x, RowMap xm, const T* __restrict__ w,
                    const float* __restrict__ mean, const float* __restrict__ rstd, const T* dx_in, T* dx,
                    float* __restrict__ partial, int64_t rows, int c, int group) {
  constexpr int P = Pack128<T>::size;
  const int packs = c / P, g = threadIdx.x % group, rows_per_block = blockDim.x / group;
  const float inv_c = 1.0f / float(c);

  float acc_w[kPacks][P] = {}, acc_b[kPacks][P] = {};
  for (int64_t row = int64_t(blockIdx.x) * rows_per_block + threadIdx.x / group; row < rows;
       row += int64_t(gridDim.x) * rows_per_block) {
    const float mu = kCentered ? mean[row] : 0.0f, s = rstd[row];
    const T* xr = x + xm(row, c);
    const T* dyr = dy + dym(row, c);
    const T* dx_inr = dx_in + dym(row, c);
    T* dxr = dx + dym(row, c);
    // Pass 1: one trip to memory for x, dy (and dx when accumulating); the row sums; this row's
    // share of dw/db.
    // Only dx stays in registers (the dw/db accumulators need the room): pass 2 reads x, dy
    // and w (the same for every row) again from L1.
    Pack128<T> dxs[kPacks];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = g + k * group;
      if (p >= packs) continue;
      const Pack128<T> xk = load128(xr + p * P), dyk = load128(dyr + p * P), wk = load128(w + p * P);
      if constexpr (kAccumulate) dxs[k] = load128(dx_inr + p * P);
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const float d = to_f32(dyk[i]), xhat = (to_f32(xk[i]) - mu) * s, dxhat = d * to_f32(wk[i]);
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        acc_w[k][i] += d * xhat;
        acc_b[k][i] += d;
      }
    }
    group_sum2(sum_dxhat, sum_dxhat_xhat, group);
    const float mean_dxhat = kCentered ? sum_dxhat * inv_c : 0.0f, mean_dxhat_xhat = sum_dxhat_xhat * inv_c;
    // Pass 2: dx (+)= ..., the last use of x and dy (streaming loads).
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = g + k * group;
      if (p >= packs) continue;
      const Pack128<T> xk = load128cs(xr + p * P), dyk = load128cs(dyr + p * P), wk = load128(w + p * P);
      Pack128<T> out;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const float xhat = (to_f32(xk[i]) - mu) * s, dxhat = to_f32(dyk[i]) * to_f32(wk[i]);
        float grad = s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
        if constexpr (kAccumulate) grad += to_f32(dxs[k][i]);
        out[i] = from_f32<T>(grad);
      }
      store128(dxr + p * P, out);
    }
  }

  float* part_w = partial + int64_t(blockIdx.x) * c;
  float* part_b = partial + int64_t(gridDim.x + blockIdx.x) * c;
  if (group == int(blockDim.x)) {  // a block per row: each column has exactly one owner
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = g + k * group;
      if (p >= packs) continue;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        part_w[p * P + i] = acc_w[k][i];
        if constexpr (kCentered) part_b[p * P + i] = acc_b[k][i];
      }
    }
    return;
  }
  // A warp per row: the block's warps share columns. Add them up in shared memory, one
  // warp after another, so the result does not depend on timing.
  __shared__ float sum_w[kPacks * 32 * P], sum_b[kCentered ? kPacks * 32 * P : 1];
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    sum_w[j] = 0.0f;
    if constexpr (kCentered) sum_b[j] = 0.0f;
  }
  __syncthreads();
  for (int warp = 0; warp < rows_per_block; ++warp) {
    if (int(threadIdx.x) / 32 == warp) {
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int p = g + k * group;
        if (p >= packs) continue;
#pragma unroll
        for (int i = 0; i < P; ++i) {
          sum_w[p * P + i] += acc_w[k][i];
          if constexpr (kCentered) sum_b[p * P + i] += acc_b[k][i];
        }
      }
    }
    __syncthreads();
  }
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    part_w[j] = sum_w[j];
    if constexpr (kCentered) part_b[j] = sum_b[j];
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
