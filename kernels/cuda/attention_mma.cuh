// Warp-level tensor-core pieces of the flash-attention kernels and the grouped weight gradient
// (grouped_dw_kernel.cu), PTX of sm_80 run on sm_90: asynchronous 16-byte global -> shared copies,
// ldmatrix fragment loads, and the m16n8k16 MMA with f32 accumulators.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"), with group = lane / 4 and quad = lane % 4:
//   A (16 x 16, row-major), 4 regs of 2 values: {(g, 2q), (g + 8, 2q), (g, 2q + 8), (g + 8, 2q + 8)}
//   B (16 x 8, "col"), 2 regs:                  {(k = 2q, n = g), (k = 2q + 8, n = g)}
//   C (16 x 8) f32, 4 values:                   (g, 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1)
// Each register holds the pair (x, x + 1) along the row, the lower column in the low half.
// So the accumulators of a 16 x 16 product (two n-tiles) are, packed to 16 bits, exactly
// the A fragment of the next product: P = softmax(S) never leaves registers.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/common.cuh"

namespace troupe::cuda::mma {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes to shared memory without blocking the thread; zero-fills when !valid
// (gmem must still be a valid address then; nothing is read).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(valid ? 4 : 0)
               : "memory");
}
// Starts copying a Rows x Cols tile of a row-major 16-bit matrix into shared memory rows of
// `stride` elements: tile row r, columns [c, c + 8) from src + (row0 + r) * ld + c. Rows from
// n_rows on and 16-byte chunks from column n_cols on (n_cols a multiple of 8) read as zeros.
// Call from all Threads threads of the block, then cp_async_commit().
template <int Rows, int Cols, int Threads, typename T>
__device__ __forceinline__ void load_tile_async(T* smem, int stride, const T* src, int64_t ld, int64_t row0,
                                                int64_t n_rows, int n_cols) {
  static_assert(sizeof(T) == 2 && Cols % 8 == 0, "16-byte chunks of 8 16-bit values");
  constexpr int kChunks = Cols / 8;
  constexpr int kTotal = Rows * kChunks;
#pragma unroll
  for (int i = 0; i < (kTotal + Threads - 1) / Threads; ++i) {
    const int c = i * Threads + int(threadIdx.x);
    if (kTotal % Threads == 0 || c < kTotal) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const bool valid = row0 + r < n_rows && col < n_cols;
      cp_async_16(smem + r * stride + col, src + (valid ? (row0 + r) * ld + col : 0), valid);
    }
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `Pending` committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

// Where lane `lane` points ldmatrix_x4 (tile = &smem[row0][col0], `stride` elements per row):
// A fragment of the 16 x 16 row-major tile.
template <typename T>
__device__ __forceinline__ const T* a_frag_addr(const T* tile, int stride, int lane) {
  return tile + (lane % 16) * stride + (lane / 16) * 8;
}
// B fragments of two adjacent n-tiles from a tile stored [n][k] (16 n x 16 k; e.g. K for Q K^T):
// r[0], r[1] = n-tile 0 and r[2], r[3] = n-tile 1. Use ldmatrix_x4.
template <typename T>
__device__ __forceinline__ const T* b_frag_addr_nk(const T* tile, int stride, int lane) {
  return tile + ((lane / 16) * 8 + lane % 8) * stride + ((lane / 8) % 2) * 8;
}
// Same two n-tiles from a tile stored [k][n] (16 k x 16 n; e.g. V for P V). Use ldmatrix_x4_trans.
template <typename T>
__device__ __forceinline__ const T* b_frag_addr_kn(const T* tile, int stride, int lane) {
  return tile + (((lane / 8) % 2) * 8 + lane % 8) * stride + (lane / 16) * 8;
}
// A fragment of a 16 x 16 tile stored [k][m] (e.g. dy [rows][n] for dw = dy^T x). Use
// ldmatrix_x4_trans: matrix i must be the stored rows k = 8 (i / 2) .. +8, columns m = 8 (i % 2)
// .. +8 (a[1] is rows m + 8 of A, a[2] columns k + 8), and .trans hands lane (g, q) the stored
// (k = 2q, m = g), (2q + 1, g) of each, which is A's (m = g, k = 2q, 2q + 1). Those are the
// addresses b_frag_addr_nk gives a tile stored [n][k] (its n-tiles in the stored rows' halves).
template <typename T>
__device__ __forceinline__ const T* a_frag_addr_km(const T* tile, int stride, int lane) {
  return b_frag_addr_nk(tile, stride, lane);
}

// c += a * b for one m16n8k16 tile; T is the 16-bit input type.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to T, `lo` in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

// The A fragment for k-step kk of the next product from the accumulators of a 16 x N product
// (acc[n] = n-tile n): see the layouts above.
template <typename T, int NTiles>
__device__ __forceinline__ void acc_to_a_frag(uint32_t (&a)[4], const float (&acc)[NTiles][4], int kk) {
  a[0] = pack2<T>(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = pack2<T>(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = pack2<T>(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = pack2<T>(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// 2^x with denormal results flushed to zero (one MUFU.EX2; exp2f adds denormal handling).
// fast_exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Sum/max over the 4 lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

}  // namespace troupe::cuda::mma
