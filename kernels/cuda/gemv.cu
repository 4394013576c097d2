// Small-batch GEMV kernel and launcher (kernels/cuda/gemv.hpp says what and why).
//
// Work split: a block is kWarps warps; a warp owns kCols adjacent output columns (2 from 4 rows
// of x up, so each 16-byte load of x feeds two weight rows) and, when the columns are too few to
// fill the GPU (N = 768), `split` warps of a block share a column group, each taking every
// split-th 16-byte pack of K. A lane sums its packs in order, the warp reduces with shuffles,
// and the split partial sums are added in warp order through shared memory: a fixed order, so
// the result is the same bitwise on every run.
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/gemv.hpp"

namespace troupe::cuda {

namespace {

constexpr int kWarps = 4;  // warps per block; also the largest split
constexpr int kThreads = kWarps * 32;
// Packs of each weight row a lane loads before using them: loads in flight per lane.
constexpr int kUnroll = 4;
// Split K while there are fewer warps than this per SM (4 blocks of kWarps), keeping at least
// about one pack per lane per warp: spreads N = 768 over the SMs, evenly.
constexpr int kTargetWarpsPerSm = 16;

constexpr int cols_per_warp(int rows) { return rows >= 4 ? 2 : 1; }

// The norm in front of a fused GEMV (gemv_norm_forward): x's rows are normalized on the fly.
template <typename T>
struct NormParams {
  const T* w = nullptr;  // [K]
  const T* b = nullptr;  // [K] or null
  float eps = 0.0f;
};

// mean and rstd of each of kRows rows of x (mean 0 for RMSNorm), as kernels/norm.hpp defines them,
// two passes over the row (the second from L1): a warp per row, into shared memory.
template <typename T, int kRows, GemvNorm kNorm>
__device__ __forceinline__ void row_stats(const T* __restrict__ x, int64_t k, float eps, float (&stats)[kRows][2]) {
  constexpr int kPack = Pack128<T>::size;
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int64_t packs = k / kPack;
  for (int r = warp; r < kRows; r += kWarps) {
    const T* row = x + r * k;
    float mean = 0.0f;
    if constexpr (kNorm == GemvNorm::layernorm) {
      float s = 0.0f;
      for (int64_t p = lane; p < packs; p += 32) {
        const Pack128<T> v = load128(row + p * kPack);
#pragma unroll
        for (int e = 0; e < kPack; ++e) s += to_f32(v[e]);
      }
      mean = warp_sum(s) / float(k);
    }
    float ss = 0.0f;
    for (int64_t p = lane; p < packs; p += 32) {
      const Pack128<T> v = load128(row + p * kPack);
#pragma unroll
      for (int e = 0; e < kPack; ++e) {
        const float d = to_f32(v[e]) - mean;
        ss = fmaf(d, d, ss);
      }
    }
    const float var = warp_sum(ss) / float(k);
    if (lane == 0) {
      stats[r][0] = mean;
      stats[r][1] = rsqrtf(var + eps);
    }
  }
  __syncthreads();
}

// y[r, n] (=|+=) sum_k x[r, k] w[n, k] + b[n] for kRows rows; b may be null. With kNorm, x's
// rows are first normalized (rounded to T, as the unfused norm's output would be). Block: kThreads.
template <typename T, int kRows, bool kGelu, GemvNorm kNorm>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y, int64_t k,
                int64_t n, int split, bool accumulate, NormParams<T> norm) {
  constexpr int kCols = cols_per_warp(kRows);
  constexpr int kOut = kCols * kRows;  // sums a warp produces; lane c * kRows + r holds (c, r)
  constexpr int kPack = Pack128<T>::size;
  static_assert(kOut <= 32, "a warp's outputs must fit its lanes");
  __shared__ float partial[kWarps][kOut];
  __shared__ float stats[kRows][2];  // mean, rstd of each row (with kNorm)

  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int group = warp / split, part = warp % split;
  const int64_t n0 = (int64_t(blockIdx.x) * (kWarps / split) + group) * kCols;
  // Columns past N (the last block's) reload row N - 1 and drop the result: no divergence,
  // and every warp reaches the __syncthreads below.
  const T* w_rows[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) w_rows[c] = w + min(n0 + c, n - 1) * k;

  const int64_t packs = k / kPack, stride = int64_t(32) * split;
  // A round: kUnroll packs of each weight row, all loaded before any is used (loads in flight).
  Pack128<T> wv[kUnroll][kCols];
  const auto load_round = [&](int64_t p0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (p0 + u * stride < packs)
#pragma unroll
        for (int c = 0; c < kCols; ++c) wv[u][c] = load128cs(w_rows[c] + (p0 + u * stride) * kPack);
  };
  int64_t p0 = int64_t(part) * 32 + lane;
  load_round(p0);  // the first round's loads overlap the norm's statistics (and the prior kernel)
  wait_for_prior_grids();

  float mean[kRows], rstd[kRows];
  if constexpr (kNorm != GemvNorm::none) {
    row_stats<T, kRows, kNorm>(x, k, norm.eps, stats);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      mean[r] = stats[r][0];
      rstd[r] = stats[r][1];
    }
  }

  float acc[kCols][kRows] = {};
  while (p0 < packs) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = p0 + u * stride;
      if (p >= packs) continue;
      Pack128<T> gv, bv;
      if constexpr (kNorm != GemvNorm::none) {
        gv = load128(norm.w + p * kPack);
        if (norm.b != nullptr) bv = load128(norm.b + p * kPack);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const Pack128<T> xv = load128(x + r * k + p * kPack);  // tiny, shared by all warps: L1
        float xf[kPack];
#pragma unroll
        for (int e = 0; e < kPack; ++e) {
          xf[e] = to_f32(xv[e]);
          if constexpr (kNorm != GemvNorm::none) {
            const float beta = norm.b != nullptr ? to_f32(bv[e]) : 0.0f;
            xf[e] = to_f32(from_f32<T>(fmaf((xf[e] - mean[r]) * rstd[r], to_f32(gv[e]), beta)));
          }
        }
#pragma unroll
        for (int c = 0; c < kCols; ++c)
#pragma unroll
          for (int e = 0; e < kPack; ++e) acc[c][r] = fmaf(xf[e], to_f32(wv[u][c][e]), acc[c][r]);
      }
    }
    p0 += stride * kUnroll;
    load_round(p0);
  }
  allow_dependent_launch();

  float sum = 0.0f;  // this lane's output (lane < kOut)
#pragma unroll
  for (int c = 0; c < kCols; ++c)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float s = warp_sum(acc[c][r]);
      if (lane == c * kRows + r) sum = s;
    }
  if (split > 1) {  // uniform over the block
    if (lane < kOut) partial[warp][lane] = sum;
    __syncthreads();
    if (part != 0 || lane >= kOut) return;
    sum = 0.0f;
    for (int s = 0; s < split; ++s) sum += partial[warp + s][lane];
  }
  if (lane >= kOut) return;
  const int64_t col = n0 + lane / kRows, row = lane % kRows;
  if (col >= n) return;
  float v = sum;
  if (b != nullptr) v += to_f32(b[col]);
  if constexpr (kGelu) v = gelu_of(v);
  T* out = y + row * n + col;
  if (accumulate) v += to_f32(*out);
  *out = from_f32<T>(v);
}

// Warps sharing a column group: double while the GPU is short of warps and each lane keeps
// about a pack per warp.
int choose_split(int64_t column_groups, int64_t packs, int sm_count) {
  int split = 1;
  while (split < kWarps && column_groups * split < int64_t(kTargetWarpsPerSm) * sm_count && packs >= 64 * split)
    split *= 2;
  return split;
}

// One GEMV's tensors (b, norm_w, norm_b may be undefined).
struct GemvCall {
  const Tensor &x, &w, &b, &y;
  bool accumulate;
  const Tensor &norm_w, &norm_b;
  float eps;
};

template <typename T, int kRows, bool kGelu, GemvNorm kNorm>
void launch_gemv(const Context& ctx, const GemvCall& a) {
  const CudaState& st = ctx.cuda_state();
  const int64_t k = a.x.dim(1), n = a.w.dim(0);
  const int64_t groups = (n + cols_per_warp(kRows) - 1) / cols_per_warp(kRows);
  const int split = choose_split(groups, k / Pack128<T>::size, st.sm_count);
  const int groups_per_block = kWarps / split;
  const auto data_or_null = [](const Tensor& t) { return t.defined() ? t.data_as<T>() : nullptr; };
  const NormParams<T> norm{data_or_null(a.norm_w), data_or_null(a.norm_b), a.eps};
  const auto kernel = gemv_kernel<T, kRows, kGelu, kNorm>;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(ceil_div(groups, groups_per_block)));
  config.blockDim = dim3(kThreads);
  config.stream = st.stream;
  cudaLaunchAttribute early{};
  static const bool waits = waits_for_prior_grids(reinterpret_cast<const void*>(kernel));  // per instance
  allow_early_start(config, early, waits);
  TROUPE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a.x.data_as<T>(), a.w.data_as<T>(),
                                       static_cast<const T*>(data_or_null(a.b)), a.y.data_as<T>(), k, n, split,
                                       a.accumulate, norm));
}

// Turns the runtime row count into the kernel's template argument.
template <typename T, bool kGelu, GemvNorm kNorm, int kRows = 1>
void launch_gemv_rows(const Context& ctx, const GemvCall& a) {
  if constexpr (kRows <= kGemvMaxRows) {
    if (a.x.dim(0) == kRows)
      launch_gemv<T, kRows, kGelu, kNorm>(ctx, a);
    else
      launch_gemv_rows<T, kGelu, kNorm, kRows + 1>(ctx, a);
  } else {
    TROUPE_FAIL("gemv_forward: x has ", a.x.dim(0), " rows, the GEMV path takes 1 to ", kGemvMaxRows);
  }
}

template <typename T, GemvNorm kNorm>
void launch_gemv_norm(const Context& ctx, const GemvCall& a, bool gelu) {
  if (gelu)
    launch_gemv_rows<T, true, kNorm>(ctx, a);
  else
    launch_gemv_rows<T, false, kNorm>(ctx, a);
}

void launch(const Context& ctx, const GemvCall& a, bool gelu, GemvNorm norm) {
  TROUPE_CHECK(!(gelu && a.accumulate), "gemv_forward: GELU does not combine with accumulate");
  dispatch_float(a.x.dtype(), "gemv_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, float>) {  // gemv_supports refuses f32
      switch (norm) {
        case GemvNorm::none:
          launch_gemv_norm<T, GemvNorm::none>(ctx, a, gelu);
          return;
        case GemvNorm::layernorm:
          launch_gemv_norm<T, GemvNorm::layernorm>(ctx, a, gelu);
          return;
        case GemvNorm::rmsnorm:
          launch_gemv_norm<T, GemvNorm::rmsnorm>(ctx, a, gelu);
          return;
      }
    }
  });
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

}  // namespace

bool decode_gemv_flag_from(const char* value) {
  if (value == nullptr || std::strcmp(value, "1") == 0) return true;
  if (std::strcmp(value, "0") == 0) return false;
  TROUPE_FAIL("environment variable TROUPE_DECODE_GEMV is '", value,
              "': set it to 1 (small-batch GEMV for decode, the default) or 0 (cuBLASLt for every linear)");
}

bool decode_gemv_enabled() {
  static const bool enabled = decode_gemv_flag_from(std::getenv("TROUPE_DECODE_GEMV"));
  return enabled;
}

bool gemv_supports(const Tensor& x, const Tensor& w, const Tensor& y) {
  const DType t = x.dtype();
  const int64_t m = x.dim(0), k = x.dim(1);
  return (t == DType::bf16 || t == DType::f16) && w.dtype() == t && y.dtype() == t && m >= 1 && m <= kGemvMaxRows &&
         k % 8 == 0 && w.dim(0) >= 1 && aligned16(x) && aligned16(w);
}

bool gemv_applies(const Tensor& x, const Tensor& w, const Tensor& y) {
  return decode_gemv_enabled() && x.dim(0) <= kGemvDispatchRows && gemv_supports(x, w, y);
}

void gemv_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                  bool accumulate, bool gelu) {
  TROUPE_CHECK(gemv_supports(x, w, y), "gemv_forward: x ", x.str(), ", w ", w.str(), " and y ", y.str(), " need 1 to ",
               kGemvMaxRows, " rows, bf16 or f16, K a multiple of 8 and 16-byte aligned x and w");
  const Tensor none;
  launch(ctx, {x, w, b, y, accumulate, none, none, 0.0f}, gelu, GemvNorm::none);
}

bool gemv_norm_supports(const Tensor& x, const Tensor& norm_w, const Tensor& norm_b, const Tensor& w, const Tensor& y) {
  return gemv_supports(x, w, y) && aligned16(norm_w) && (!norm_b.defined() || aligned16(norm_b));
}

void gemv_norm_forward(const Context& ctx, const Tensor& x, GemvNorm norm, const Tensor& norm_w, const Tensor& norm_b,
                       float eps, const Tensor& w, const Tensor& b, const Tensor& y, bool gelu) {
  TROUPE_CHECK(gemv_norm_supports(x, norm_w, norm_b, w, y), "gemv_norm_forward: x ", x.str(), ", w ", w.str(),
               " and y ", y.str(), " need 1 to ", kGemvMaxRows,
               " rows, bf16 or f16, K a multiple of 8 and 16-byte aligned x, w and norm weights");
  TROUPE_CHECK(norm != GemvNorm::none, "gemv_norm_forward: no norm given (use gemv_forward)");
  TROUPE_CHECK(norm == GemvNorm::layernorm || !norm_b.defined(), "gemv_norm_forward: RMSNorm has no bias");
  launch(ctx, {x, w, b, y, false, norm_w, norm_b, eps}, gelu, norm);
}

}  // namespace troupe::cuda
