// Grouped linear forward with the group offsets on the device (kernels/grouped_linear.hpp): one
// launch whose grid depends on R, G and N only, so it records into a CUDA graph and replays
// whatever the routing of the step.
//
// Tiles: a block computes a kBM x kBN tile of y, rows of one group and columns of one weight
// tile. The row tiles of all groups are numbered group after group (group g has
// ceil(rows_g / kBM) of them); there are at most ceil(R / kBM) + G, which is grid.x. Each block
// finds its (group, row tile) from the offsets and returns if its number is past the last tile,
// so an empty group costs nothing and a group's weight tile is read once per row tile: at
// decode (a few rows per expert) each used expert's weight is read once. Consecutive blocks are
// row tiles of one column tile, so a group's weight tile is read while still in L2.
//
// Math: f32 accumulation. 16-bit inputs on tensor cores (WMMA 16x16x16, f32 accumulators);
// f32 inputs with f32 FMAs (no TF32, as linear_forward's f32 path). The next K slice is loaded
// into registers while the current one is multiplied from shared memory.
#include <mma.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/grouped_linear.hpp"

namespace troupe::cuda {

namespace {

constexpr int kBM = 32;  // rows of a tile
constexpr int kBN = 64;  // columns of a tile (weight rows)
constexpr int kBK = 64;  // K slice per step
// Shared-memory row length: 16-bit rows padded by 16 bytes (WMMA's ldm rule, fewer bank
// conflicts); f32 rows by one word, so a warp reading one k of 32 weight rows hits 32 banks.
template <typename T>
constexpr int kLd = kBK + (sizeof(T) == 4 ? 1 : 8);
constexpr int kThreads = 128;  // 4 warps: 2 x 2 warp tiles of 16 x 32 (16-bit path)

template <typename T>
constexpr int kVec = 16 / int(sizeof(T));  // elements per 16-byte load

// A kRows x kBK slice of a row-major [rows, K] matrix into registers: rows from `first` to
// `end`, columns from k0; zeros outside. Vec: 16-byte loads (K a multiple of kVec, 16-byte
// aligned base), else element by element.
template <typename T, int kRows, bool Vec>
struct SliceLoader {
  static constexpr int kPacks = kRows * kBK / kVec<T> / kThreads;  // per thread
  Pack128<T> regs[kPacks];

  __device__ void load(const T* __restrict__ m, int64_t first, int64_t end, int64_t k, int64_t k0) {
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int p = int(threadIdx.x) + i * kThreads, r = p / (kBK / kVec<T>), c = (p % (kBK / kVec<T>)) * kVec<T>;
      const int64_t row = first + r, col = k0 + c;
      const T* src = m + row * k + col;
      if constexpr (Vec) {
        if (row < end && col < k) {
          regs[i] = load128(src);
        } else {
#pragma unroll
          for (int j = 0; j < kVec<T>; ++j) regs[i][j] = from_f32<T>(0.0f);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kVec<T>; ++j) regs[i][j] = row < end && col + j < k ? src[j] : from_f32<T>(0.0f);
      }
    }
  }
  __device__ void store(T (*tile)[kLd<T>]) const {
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int p = int(threadIdx.x) + i * kThreads, r = p / (kBK / kVec<T>), c = (p % (kBK / kVec<T>)) * kVec<T>;
#pragma unroll
      for (int j = 0; j < kVec<T>; ++j) tile[r][c + j] = regs[i][j];
    }
  }
};

// acc (the caller's shape) += a [kBM, kBK] . b [kBN, kBK]^T from shared memory.
template <typename T>
struct TileMma {
  // 16-bit: warp w owns rows 16 (w / 2) .. +16 and columns 32 (w % 2) .. +32, two 16 x 16 fragments.
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc[2];

  __device__ void zero() {
    for (auto& f : acc) nvcuda::wmma::fill_fragment(f, 0.0f);
  }
  __device__ void step(const T (*a)[kLd<T>], const T (*b)[kLd<T>], int live_rows) {
    using namespace nvcuda;
    const int warp = int(threadIdx.x) / 32, wm = warp / 2, wn = warp % 2;
    if (16 * wm >= live_rows) return;  // this warp's rows are all past the group's end
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, &a[16 * wm][kk], kLd<T>);
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        // b's element (k, n) sits at b[n][k]: a column-major K x N operand.
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fb, &b[32 * wn + 16 * f][kk], kLd<T>);
        wmma::mma_sync(acc[f], fa, fb, acc[f]);
      }
    }
  }
  __device__ void write(float (*out)[kBN + 4]) {
    using namespace nvcuda;
    const int warp = int(threadIdx.x) / 32, wm = warp / 2, wn = warp % 2;
    for (int f = 0; f < 2; ++f)
      wmma::store_matrix_sync(&out[16 * wm][32 * wn + 16 * f], acc[f], kBN + 4, wmma::mem_row_major);
  }
};

// f32: thread t owns column t % kBN and rows 16 (t / kBN) .. +16.
template <>
struct TileMma<float> {
  static constexpr int kRowsPer = kBM * kBN / kThreads;
  float acc[kRowsPer];

  __device__ void zero() {
    for (float& v : acc) v = 0.0f;
  }
  __device__ void step(const float (*a)[kLd<float>], const float (*b)[kLd<float>], int live_rows) {
    const int col = int(threadIdx.x) % kBN, r0 = int(threadIdx.x) / kBN * kRowsPer;
    if (r0 >= live_rows) return;
    for (int kk = 0; kk < kBK; ++kk) {
      const float w = b[col][kk];
#pragma unroll
      for (int i = 0; i < kRowsPer; ++i) acc[i] = fmaf(a[r0 + i][kk], w, acc[i]);
    }
  }
  __device__ void write(float (*out)[kBN + 4]) {
    const int col = int(threadIdx.x) % kBN, r0 = int(threadIdx.x) / kBN * kRowsPer;
    for (int i = 0; i < kRowsPer; ++i) out[r0 + i][col] = acc[i];
  }
};

__device__ __forceinline__ int64_t clamp_to(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

template <typename T, bool Vec>
__global__ void __launch_bounds__(kThreads)
    grouped_linear_offsets_kernel(const T* __restrict__ x, const T* __restrict__ w, const int32_t* __restrict__ offsets,
                                  T* __restrict__ y, int64_t rows, int64_t n, int64_t k, int groups) {
  __shared__ alignas(32) T a[kBM][kLd<T>];
  __shared__ alignas(32) T b[kBN][kLd<T>];
  __shared__ alignas(32) float out[kBM][kBN + 4];
  __shared__ int64_t tile_rows[3];  // group, first row, end row; group -1: no tile

  if (threadIdx.x == 0) {
    int64_t t = blockIdx.x;
    tile_rows[0] = -1;
    for (int g = 0; g < groups; ++g) {
      // Clamped to [0, R]: offsets outside it cannot make the kernel read or write out of bounds.
      const int64_t from = clamp_to(offsets[g], 0, rows), to = clamp_to(offsets[g + 1], from, rows);
      const int64_t tiles = (to - from + kBM - 1) / kBM;
      if (t < tiles) {
        tile_rows[0] = g;
        tile_rows[1] = from + t * kBM;
        tile_rows[2] = clamp_to(from + (t + 1) * kBM, 0, to);
        break;
      }
      t -= tiles;
    }
  }
  __syncthreads();
  const int64_t group = tile_rows[0], first = tile_rows[1], end = tile_rows[2];
  if (group < 0) return;
  const int64_t n0 = int64_t(blockIdx.y) * kBN;
  const T* wg = w + group * n * k + n0 * k;  // this tile's weight rows

  SliceLoader<T, kBM, Vec> xa;
  SliceLoader<T, kBN, Vec> wb;
  TileMma<T> mma;
  mma.zero();
  xa.load(x, first, end, k, 0);
  wb.load(wg, 0, n - n0, k, 0);
  for (int64_t k0 = 0; k0 < k; k0 += kBK) {
    xa.store(a);
    wb.store(b);
    __syncthreads();
    if (k0 + kBK < k) {  // the next slice's loads in flight during this slice's math
      xa.load(x, first, end, k, k0 + kBK);
      wb.load(wg, 0, n - n0, k, k0 + kBK);
    }
    mma.step(a, b, int(end - first));
    __syncthreads();
  }
  mma.write(out);
  __syncthreads();
  for (int i = int(threadIdx.x); i < kBM * kBN; i += kThreads) {
    const int r = i / kBN, c = i % kBN;
    if (first + r < end && n0 + c < n) y[(first + r) * n + n0 + c] = from_f32<T>(out[r][c]);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& offsets,
                            const Tensor& y) {
  const int64_t rows = x.dim(0), groups = w.dim(0), n = w.dim(1), k = w.dim(2);
  if (rows == 0 || n == 0) return;
  cudaStream_t stream = stream_of(ctx);
  if (k == 0) {  // an empty sum: zeros
    TROUPE_CUDA_CHECK(cudaMemsetAsync(y.data(), 0, y.nbytes(), stream));
    return;
  }
  const dim3 grid(ceil_div(rows, kBM) + unsigned(groups), ceil_div(n, kBN));
  dispatch_float(x.dtype(), "grouped_linear_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vec = k % kVec<T> == 0 && aligned16(x.data()) && aligned16(w.data());
    auto launch = [&](auto kernel) {
      kernel<<<grid, kThreads, 0, stream>>>(x.data_as<T>(), w.data_as<T>(), offsets.data_as<int32_t>(), y.data_as<T>(),
                                            rows, n, k, int(groups));
    };
    if (vec)
      launch(grouped_linear_offsets_kernel<T, true>);
    else
      launch(grouped_linear_offsets_kernel<T, false>);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
