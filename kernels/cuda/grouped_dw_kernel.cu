// dw[g] += dy_g^T x_g for every group in one launch (kernels/cuda/grouped_dw_kernel.hpp).
//
// Grid: x = the 128 x 128 tiles of one [N, K] gradient (n-tile major), y = the group. A block
// reads its group's rows from the device offsets and returns at once when there are none, so
// empty groups cost a block start; consecutive blocks are tiles of one group and read its rows
// of dy and x while they are in L2.
//
// A block sums the product over its group's rows in chunks of kChunkRows, pipelined over kStages
// shared-memory stages with cp.async: the next kStages - 1 chunks' rows of dy (the tile's 128
// columns of N) and of x (its 128 columns of K) load while the current chunk multiplies, so a
// chunk read from DRAM has that long to arrive. Rows past the group's end and columns past N or K
// load as zeros, so a chunk's tail and a tile's edge add nothing.
//
// Tensor cores: mma.m16n8k16 with M = dw's rows (n), N = dw's columns (k), K = the group's rows
// (r). A (16 n x 16 r) is dy^T and B (16 r x 8 k) is x: both are stored [r][...] in shared
// memory, i.e. transposed for A's row-major fragment and in B's [k][n] order, so both are loaded
// with ldmatrix .trans (attention_mma.cuh: a_frag_addr_km, b_frag_addr_kn). 8 warps as 2 x 4, each
// a 64 x 32 piece of the tile: 4 x 4 accumulator tiles of 16 x 8.
//
// Epilogue: each lane adds its accumulators onto dw (C's pairs of adjacent columns); each element
// belongs to exactly one block and lane. The tile's lines of dw are prefetched into L2 when the
// block starts, so the read waits on L2, not on DRAM.
#include <cstdint>

#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grouped_dw_kernel.hpp"

namespace troupe::cuda {

namespace {

using namespace mma;

constexpr int kTileN = 128;     // dw rows (columns of dy) per block
constexpr int kTileK = 128;     // dw columns (columns of x) per block
constexpr int kChunkRows = 32;  // the reduction's rows per pipeline stage: 2 MMA k-steps
constexpr int kStages = 4;      // chunks in shared memory at once (3 loading, 1 multiplying)
constexpr int kWarpsN = 2;      // warps along the tile's rows
constexpr int kWarpsK = 4;      // warps along the tile's columns
constexpr int kThreads = 32 * kWarpsN * kWarpsK;
constexpr int kWarpN = kTileN / kWarpsN;  // 64 rows: 4 m-tiles of 16
constexpr int kWarpK = kTileK / kWarpsK;  // 32 columns: 4 n-tiles of 8
constexpr int kMTiles = kWarpN / 16;
constexpr int kNTiles = kWarpK / 8;
// Shared rows padded by 16 bytes: the 8 row addresses of one ldmatrix matrix fall in distinct
// banks (a pitch of 272 bytes instead of 256).
constexpr int kStrideDy = kTileN + 8;
constexpr int kStrideX = kTileK + 8;
static_assert(kNTiles % 2 == 0, "ldmatrix_x4_trans loads two n-tiles of B");
static_assert(kChunkRows % 16 == 0, "whole MMA k-steps per chunk");
static_assert(kStages >= 2, "one stage loads while another multiplies");

template <typename T>
struct Stage {
  T dy[kChunkRows][kStrideDy];  // rows r of the chunk, the tile's columns n of dy
  T x[kChunkRows][kStrideX];    // rows r of the chunk, the tile's columns k of x
};
// Dynamic shared memory of a block: kStages stages (69,632 bytes; two blocks fit on an SM).
template <typename T>
constexpr size_t kSmemBytes = kStages * sizeof(Stage<T>);

__device__ __forceinline__ int64_t clamp_to(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    grouped_dw_tile_kernel(const T* __restrict__ dy, const T* __restrict__ x, const int32_t* __restrict__ offsets,
                           float* __restrict__ dw, int64_t rows, int n, int k) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Stage<T>* stages = reinterpret_cast<Stage<T>*>(smem_raw);

  const int g = int(blockIdx.y);
  // Clamped to [0, R]: offsets outside it cannot make the kernel read out of bounds.
  const int64_t from = clamp_to(offsets[g], 0, rows), to = clamp_to(offsets[g + 1], from, rows);
  if (from == to) return;                    // the whole block: nothing to add
  const int tiles_k = (k - 1) / kTileK + 1;  // k > 0
  const int n0 = int(blockIdx.x) / tiles_k * kTileN, k0 = int(blockIdx.x) % tiles_k * kTileK;
  const int64_t chunks = (to - from + kChunkRows - 1) / kChunkRows;

  // Starts loading chunk c's rows [from + c kChunkRows, +kChunkRows) into stage c % kStages (rows
  // from `to` on are zeros), if there is a chunk c; then commits a cp.async group either way, so
  // group i is chunk i's and an empty one past the last.
  const auto load_chunk = [&](int64_t c) {
    if (c < chunks) {
      Stage<T>& s = stages[c % kStages];
      const int64_t row0 = from + c * kChunkRows;
      load_tile_async<kChunkRows, kTileN, kThreads>(&s.dy[0][0], kStrideDy, dy + n0, n, row0, to, n - n0);
      load_tile_async<kChunkRows, kTileK, kThreads>(&s.x[0][0], kStrideX, x + k0, k, row0, to, k - k0);
    }
    cp_async_commit();
  };
  for (int c = 0; c < kStages - 1; ++c) load_chunk(c);

  float* dw_tile = dw + int64_t(g) * n * k + int64_t(n0) * k + k0;
  // The tile's 128 rows of 512 bytes: 4 lines of 128 bytes each, 2 per thread.
  for (int i = int(threadIdx.x); i < kTileN * 4; i += kThreads) {
    const int r = i / 4, c = (i % 4) * 32;
    if (n0 + r < n && k0 + c < k) prefetch_l2(dw_tile + int64_t(r) * k + c);
  }

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int warp_n = warp / kWarpsK * kWarpN, warp_k = warp % kWarpsK * kWarpK;  // in the tile
  float acc[kMTiles][kNTiles][4] = {};
  for (int64_t c = 0; c < chunks; ++c) {
    // kStages - 1 + c groups committed: with at most kStages - 2 in flight, groups 0..c (chunk c)
    // have landed, this thread's copies; after the barrier, every thread's. The barrier also
    // means every warp is done with chunk c - 1, whose stage chunk c + kStages - 1 loads into.
    cp_async_wait<kStages - 2>();
    __syncthreads();
    load_chunk(c + kStages - 1);
    const Stage<T>& s = stages[c % kStages];
#pragma unroll
    for (int kk = 0; kk < kChunkRows / 16; ++kk) {
      uint32_t a[kMTiles][4], b[kNTiles / 2][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        ldmatrix_x4_trans(a[mt], a_frag_addr_km(&s.dy[16 * kk][warp_n + 16 * mt], kStrideDy, lane));
#pragma unroll
      for (int nb = 0; nb < kNTiles / 2; ++nb)
        ldmatrix_x4_trans(b[nb], b_frag_addr_kn(&s.x[16 * kk][warp_k + 16 * nb], kStrideX, lane));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nb = 0; nb < kNTiles / 2; ++nb) {
          mma_16816<T>(acc[mt][2 * nb], a[mt], b[nb][0], b[nb][1]);
          mma_16816<T>(acc[mt][2 * nb + 1], a[mt], b[nb][2], b[nb][3]);
        }
    }
  }

  // acc[mt][nt] = C of rows warp_n + 16 mt .. +16 and columns warp_k + 8 nt .. +8 of the tile;
  // the lane holds (row lane / 4, columns 2 (lane % 4) + 0, 1) in [0], [1] and row lane / 4 + 8
  // in [2], [3] (attention_mma.cuh's C layout).
  const int lane_row = lane / 4, lane_col = (lane % 4) * 2;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_n + 16 * mt + lane_row + 8 * half;
      if (n0 + r >= n) continue;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int c = warp_k + 8 * nt + lane_col;
        if (k0 + c >= k) continue;  // K is a multiple of 8, so column c + 1 is inside with c
        // Two 4-byte accesses, not one of 8: dw may be a view at any float offset of a flat
        // gradient buffer. They touch the same 32-byte sectors.
        float* out = dw_tile + int64_t(r) * k + c;
        out[0] += acc[mt][nt][2 * half];
        out[1] += acc[mt][nt][2 * half + 1];
      }
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool grouped_dw_kernel_fits(const Tensor& dy, const Tensor& x, const Tensor& dw) {
  const DType d = x.dtype();
  const int64_t groups = dw.dim(0), n = dw.dim(1), k = dw.dim(2);
  return (d == DType::bf16 || d == DType::f16) && n % 8 == 0 && k % 8 == 0 && n <= INT32_MAX && k <= INT32_MAX &&
         groups <= 65535 && x.dim(0) <= INT32_MAX && int64_t(ceil_div(n, kTileN)) * ceil_div(k, kTileK) <= INT32_MAX &&
         aligned16(dy.data()) && aligned16(x.data());
}

void grouped_dw_kernel(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& offsets, const Tensor& dw) {
  TROUPE_CHECK(grouped_dw_kernel_fits(dy, x, dw), "grouped_dw_kernel: operands it does not take: dy ", dy.str(), ", x ",
               x.str(), ", dw ", dw.str());
  const int64_t rows = x.dim(0), groups = dw.dim(0), n = dw.dim(1), k = dw.dim(2);
  if (rows == 0 || groups == 0 || n == 0 || k == 0) return;  // nothing to add
  const dim3 grid(ceil_div(n, kTileN) * ceil_div(k, kTileK), unsigned(groups));
  const CudaState& st = ctx.cuda_state();
  dispatch_16bit(x.dtype(), "grouped_linear_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr size_t smem = kSmemBytes<T>;
    TROUPE_CHECK(smem <= st.smem_per_block_optin, "grouped_linear_backward: the weight-gradient kernel needs ", smem,
                 " bytes of shared memory per block, the device allows ", st.smem_per_block_optin);
    auto kernel = grouped_dw_tile_kernel<T>;
    TROUPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<grid, kThreads, smem, st.stream>>>(dy.data_as<T>(), x.data_as<T>(), offsets.data_as<int32_t>(),
                                                dw.data_as<float>(), rows, int(n), int(k));
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
