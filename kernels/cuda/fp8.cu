// FP8 casts, amax, transpose and the scale update on CUDA. The casts are cuda_fp8.h's
// saturating conversions (cvt.rn.satfinite on sm_89+), which the CPU backend emulates bit-exactly.
// A cast given an amax also folds |x| into it in the same pass (delayed scaling records the
// amax of what it casts).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_convert.cuh"
#include "kernels/fp8.hpp"
#include "kernels/fp8_scale.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kAmaxBlocksPerSm = 8;
constexpr int kTile = 32;    // transpose tile: kTile x kTile bytes through shared memory
constexpr int kCtTile = 64;  // cast-transpose tile: kCtTile x kCtTile elements
constexpr int kCtPad = 4;    // bytes after each tile row in shared memory (fewer bank conflicts)

// Elements of T in one 16-byte load.
template <typename T>
constexpr int kVec = 16 / int(sizeof(T));

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// amax: nullptr, or |x| folded in (amax_commit).
template <typename T, Fp8Format F>
__global__ void cast_kernel(const T* __restrict__ x, const float* __restrict__ scale, uint8_t* __restrict__ q,
                            int64_t n, unsigned* __restrict__ amax) {
  const float s = *scale;
  unsigned best = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = to_f32(x[i]);
    best = max(best, abs_bits(v));
    q[i] = to_fp8<F>(v * s);
  }
  if (amax) amax_commit(best, amax);
}

// Whole 16-byte loads of x (kVec<T> elements each; x and q aligned to match): the bulk of a
// cast. The rest, i >= n_vec * kVec<T>, goes to cast_kernel.
template <typename T, Fp8Format F>
__global__ void cast_vec_kernel(const uint4* __restrict__ x, const float* __restrict__ scale, uint8_t* __restrict__ q,
                                int64_t n_vec, unsigned* __restrict__ amax) {
  constexpr int E = kVec<T>;
  const float s = *scale;
  unsigned best = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 raw = x[i];
    const T* v = reinterpret_cast<const T*>(&raw);
    uint8_t out[E];
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float f = to_f32(v[k]);
      best = max(best, abs_bits(f));
      out[k] = to_fp8<F>(f * s);
    }
    if constexpr (E == 8)
      reinterpret_cast<uint2*>(q)[i] = *reinterpret_cast<const uint2*>(out);
    else
      reinterpret_cast<uint32_t*>(q)[i] = *reinterpret_cast<const uint32_t*>(out);
  }
  if (amax) amax_commit(best, amax);
}

template <typename T, Fp8Format F>
__global__ void dequantize_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale_inv, T* __restrict__ y,
                                  int64_t n) {
  const float s = *scale_inv;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(from_fp8<F>(q[i]) * s);
}

template <typename T>
__global__ void amax_kernel(const T* __restrict__ x, int64_t n, unsigned* __restrict__ amax) {
  unsigned best = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    best = max(best, abs_bits(to_f32(x[i])));
  amax_commit(best, amax);
}

template <typename T>
__global__ void amax_vec_kernel(const uint4* __restrict__ x, int64_t n_vec, unsigned* __restrict__ amax) {
  unsigned best = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 raw = x[i];
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) best = max(best, abs_bits(to_f32(v[k])));
  }
  amax_commit(best, amax);
}

// One kCtTile x kCtTile tile of x [rows, cols] (both multiples of 8): cast once, written as q
// (when given) and transposed into qt [cols, rows], |x| folded into amax (when given). 256
// threads; loads of 8 elements, stores of 8 bytes along qt's rows.
template <typename T, Fp8Format F>
__global__ void cast_transpose_kernel(const T* __restrict__ x, const float* __restrict__ scale, uint8_t* __restrict__ q,
                                      uint8_t* __restrict__ qt, int64_t rows, int64_t cols,
                                      unsigned* __restrict__ amax) {
  __shared__ __align__(16) uint8_t tile[kCtTile][kCtTile + kCtPad];
  const int64_t r0 = int64_t(blockIdx.y) * kCtTile, c0 = int64_t(blockIdx.x) * kCtTile;
  const float s = *scale;
  const int group = threadIdx.x % 8, lane_row = threadIdx.x / 8;  // 8 groups of 8 columns, 32 rows a pass
  unsigned best = 0;
  for (int r = lane_row; r < kCtTile; r += 32) {
    const int64_t row = r0 + r, col = c0 + 8 * group;
    if (row >= rows || col >= cols) continue;
    const uint4 raw = *reinterpret_cast<const uint4*>(x + row * cols + col);  // 8 elements: T is 16-bit
    const T* v = reinterpret_cast<const T*>(&raw);
    uint8_t out[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float f = to_f32(v[k]);
      best = max(best, abs_bits(f));
      out[k] = to_fp8<F>(f * s);
    }
    uint32_t* t = reinterpret_cast<uint32_t*>(&tile[r][8 * group]);
    t[0] = *reinterpret_cast<const uint32_t*>(out);
    t[1] = *reinterpret_cast<const uint32_t*>(out + 4);
    if (q) *reinterpret_cast<uint2*>(q + row * cols + col) = *reinterpret_cast<const uint2*>(out);
  }
  if (amax) amax_commit(best, amax);
  __syncthreads();
  // Eight threads write one qt row's 64 bytes of this tile (8 rows of x each), 32 columns a pass.
  const int part = threadIdx.x % 8, lane_col = threadIdx.x / 8;
  for (int c = lane_col; c < kCtTile; c += 32) {
    const int64_t col = c0 + c, row = r0 + 8 * part;
    if (row >= rows || col >= cols) continue;
    uint8_t out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = tile[8 * part + j][c];
    *reinterpret_cast<uint2*>(qt + col * rows + row) = *reinterpret_cast<const uint2*>(out);
  }
}

__global__ void transpose_kernel(const uint8_t* __restrict__ q, uint8_t* __restrict__ qt, int64_t rows, int64_t cols) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int64_t r = r0 + dy, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[dy][threadIdx.x] = q[r * cols + c];
  }
  __syncthreads();
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int64_t c = c0 + dy, r = r0 + threadIdx.x;
    if (r < rows && c < cols) qt[c * rows + r] = tile[threadIdx.x][dy];
  }
}

// One thread per tensor: its column of the history, its scale (kernels/fp8_scale.hpp's rule).
__global__ void scales_update_kernel(float* __restrict__ history, float* __restrict__ scale,
                                     float* __restrict__ scale_inv, int64_t inv_row, int64_t len, int64_t count,
                                     float fp8_max, int margin, bool amax_max, bool roll) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count) return;
  float amax = history[t];
  if (amax_max)
    for (int64_t k = 1; k < len; ++k) {
      const float h = history[k * count + t];
      amax = amax < h ? h : amax;  // std::max's comparison, as the CPU backend
    }
  scale[t] = fp8_scale_from_amax(amax, scale[t], fp8_max, margin);
  scale_inv[t * inv_row] = 1.0f / scale[t];
  if (!roll) return;
  for (int64_t k = len - 1; k > 0; --k) history[k * count + t] = history[(k - 1) * count + t];
  history[t] = 0.0f;
}

unsigned grid_for(const Context& ctx, int64_t n) {
  const int64_t blocks = std::max<int64_t>(1, (n + kThreads - 1) / kThreads);
  return unsigned(std::min<int64_t>(blocks, int64_t(ctx.cuda_state().sm_count) * 32));
}

// Calls f(std::integral_constant<Fp8Format, F>{}).
template <typename Fn>
void dispatch_format(Fp8Format f, Fn&& fn) {
  if (f == Fp8Format::e4m3)
    fn(std::integral_constant<Fp8Format, Fp8Format::e4m3>{});
  else
    fn(std::integral_constant<Fp8Format, Fp8Format::e5m2>{});
}

}  // namespace

void fp8_cast(const Context& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q,
              const Tensor& amax) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const cudaStream_t stream = ctx.cuda_state().stream;
  unsigned* amax_bits = amax.defined() ? amax.data_as<unsigned>() : nullptr;
  dispatch_float(x.dtype(), "fp8_cast", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int E = kVec<T>;
    // The 16-byte loads where x and q line up for them, element by element after (or throughout).
    const int64_t n_vec = aligned(x.data(), 16) && aligned(q.data(), size_t(E)) ? n / E : 0;
    dispatch_format(f, [&](auto format) {
      constexpr Fp8Format F = decltype(format)::value;
      if (n_vec > 0) {
        cast_vec_kernel<T, F><<<grid_for(ctx, n_vec), kThreads, 0, stream>>>(
            static_cast<const uint4*>(x.data()), scale.data_as<float>(), q.data_as<uint8_t>(), n_vec, amax_bits);
        TROUPE_CUDA_CHECK_LAUNCH();
      }
      const int64_t done = n_vec * E;
      if (done < n) {
        cast_kernel<T, F><<<grid_for(ctx, n - done), kThreads, 0, stream>>>(
            x.data_as<T>() + done, scale.data_as<float>(), q.data_as<uint8_t>() + done, n - done, amax_bits);
        TROUPE_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

void fp8_dequantize(const Context& ctx, const Tensor& q, Fp8Format f, const Tensor& scale_inv, const Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_float(y.dtype(), "fp8_dequantize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_format(f, [&](auto format) {
      dequantize_kernel<T, decltype(format)::value><<<grid_for(ctx, n), kThreads, 0, ctx.cuda_state().stream>>>(
          q.data_as<uint8_t>(), scale_inv.data_as<float>(), y.data_as<T>(), n);
    });
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void fp8_amax(const Context& ctx, const Tensor& x, const Tensor& amax) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const unsigned most = unsigned(ctx.cuda_state().sm_count * kAmaxBlocksPerSm);
  const cudaStream_t stream = ctx.cuda_state().stream;
  dispatch_float(x.dtype(), "fp8_amax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int E = kVec<T>;
    const int64_t n_vec = aligned(x.data(), 16) ? n / E : 0;
    if (n_vec > 0) {
      amax_vec_kernel<T><<<std::min(grid_for(ctx, n_vec), most), kThreads, 0, stream>>>(
          static_cast<const uint4*>(x.data()), n_vec, amax.data_as<unsigned>());
      TROUPE_CUDA_CHECK_LAUNCH();
    }
    const int64_t done = n_vec * E;
    if (done < n) {
      amax_kernel<T><<<std::min(grid_for(ctx, n - done), most), kThreads, 0, stream>>>(x.data_as<T>() + done, n - done,
                                                                                       amax.data_as<unsigned>());
      TROUPE_CUDA_CHECK_LAUNCH();
    }
  });
}

bool fp8_cast_transpose_fused(const Context& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q,
                              const Tensor& qt, const Tensor& amax) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  if (dtype_size(x.dtype()) != 2 || rows % 8 != 0 || cols % 8 != 0 || !aligned(x.data(), 16) ||
      !aligned(qt.data(), 8) || (q.defined() && !aligned(q.data(), 8)))
    return false;
  if (rows == 0 || cols == 0) return true;
  const dim3 grid(ceil_div(cols, kCtTile), ceil_div(rows, kCtTile));
  dispatch_16bit(x.dtype(), "fp8_cast_transpose", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_format(f, [&](auto format) {
      cast_transpose_kernel<T, decltype(format)::value><<<grid, kThreads, 0, ctx.cuda_state().stream>>>(
          x.data_as<T>(), scale.data_as<float>(), q.defined() ? q.data_as<uint8_t>() : nullptr, qt.data_as<uint8_t>(),
          rows, cols, amax.defined() ? amax.data_as<unsigned>() : nullptr);
    });
  });
  TROUPE_CUDA_CHECK_LAUNCH();
  return true;
}

void fp8_transpose(const Context& ctx, const Tensor& q, const Tensor& qt) {
  const int64_t rows = q.dim(0), cols = q.dim(1);
  if (rows == 0 || cols == 0) return;
  const dim3 grid(ceil_div(cols, kTile), ceil_div(rows, kTile)), block(kTile, 8);
  transpose_kernel<<<grid, block, 0, ctx.cuda_state().stream>>>(q.data_as<uint8_t>(), qt.data_as<uint8_t>(), rows,
                                                                cols);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void fp8_scales_update(const Context& ctx, const Tensor& amax_history, const Tensor& scale, const Tensor& scale_inv,
                       const Fp8ScalingParams& params) {
  const int64_t len = amax_history.dim(0), count = amax_history.dim(1);
  if (count == 0) return;
  scales_update_kernel<<<ceil_div(count, kThreads), kThreads, 0, ctx.cuda_state().stream>>>(
      amax_history.data_as<float>(), scale.data_as<float>(), scale_inv.data_as<float>(), scale_inv.numel() / count, len,
      count, params.fp8_max, params.margin, params.amax_max, params.roll_history);
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
