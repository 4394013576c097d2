// Tile moves shared by the flash-attention kernels: rows of one head from global into padded
// shared memory (asynchronously, block-wide), and a warp's f32 accumulators back out to
// global memory through shared memory (16-byte stores).
#pragma once

#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace troupe::cuda::flash {

// Rows in shared memory are padded by 16 bytes so that the 8 row addresses of one ldmatrix
// matrix fall in distinct banks (a pitch of 144 or 272 bytes instead of 128 or 256).
template <int D>
inline constexpr int kSmemStride = D + 8;

constexpr float kLog2e = 1.4426950408889634f;

// Starts copying rows [row0, row0 + Rows) of one head into smem [Rows][D + 8]. `head` points at
// the head's first value in row 0 and `ld` is the stride between rows; rows >= n_rows read as
// zeros. Call from all Threads threads of the block, then cp_async_commit().
template <int Rows, int D, int Threads, typename T>
__device__ __forceinline__ void load_rows_async(T* smem, const T* head, int64_t ld, int row0, int n_rows) {
  mma::load_tile_async<Rows, D, Threads>(smem, kSmemStride<D>, head, ld, row0, n_rows, D);
}

// Writes a warp's 16 x D accumulators (acc[n] = columns 8n..8n+7), times row_scale[0] for
// rows 0-7 and row_scale[1] for rows 8-15, as T into smem rows [16][D + 8].
template <typename T, int D>
__device__ __forceinline__ void stage_acc_rows(T* smem, const float (&acc)[D / 8][4], const float (&row_scale)[2],
                                               int lane) {
  const int row = lane / 4, col = (lane % 4) * 2;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    *reinterpret_cast<uint32_t*>(smem + row * kSmemStride<D> + n * 8 + col) =
        mma::pack2<T>(acc[n][0] * row_scale[0], acc[n][1] * row_scale[0]);
    *reinterpret_cast<uint32_t*>(smem + (row + 8) * kSmemStride<D> + n * 8 + col) =
        mma::pack2<T>(acc[n][2] * row_scale[1], acc[n][3] * row_scale[1]);
  }
}

// Copies Rows staged rows (smem [Rows][D + 8]) of one warp to head + (row0 + r) * ld, skipping
// rows >= n_rows. __syncwarp() between staging and this.
template <int Rows, int D, typename T>
__device__ __forceinline__ void store_rows_warp(T* head, int64_t ld, int row0, int n_rows, const T* smem, int lane) {
  constexpr int kChunks = D / 8;
  static_assert(Rows * kChunks % 32 == 0, "a warp stores whole 16-byte chunks");
#pragma unroll
  for (int i = 0; i < Rows * kChunks / 32; ++i) {
    const int c = i * 32 + lane, r = c / kChunks, col = (c % kChunks) * 8;
    if (row0 + r < n_rows) store128(head + int64_t(row0 + r) * ld + col, load128(smem + r * kSmemStride<D> + col));
  }
}

}  // namespace troupe::cuda::flash
