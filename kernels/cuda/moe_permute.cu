// MoE permute / unpermute on CUDA: every output element is a gather through the index maps
// (one thread per element), sums in f32; dprobs is one warp per (token, choice) dot product.
// No atomics, so the results are the same bits every run.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/moe_permute.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void permute_kernel(const T* __restrict__ x, const int32_t* __restrict__ row_choice, T* __restrict__ xp,
                               int64_t rows, int64_t c, int k) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * c) return;
  const int64_t r = i / c, j = i % c;
  const int32_t choice = row_choice[r];
  xp[i] = choice < 0 ? from_f32<T>(0.0f) : x[int64_t(choice / k) * c + j];
}

// out[t, j] = sum over kept i of w(t, i) in[choice_row[t, i], j]; w = probs or 1.
template <typename T>
__global__ void gather_sum_kernel(const T* __restrict__ in, const int32_t* __restrict__ choice_row,
                                  const float* __restrict__ probs, T* __restrict__ out, int64_t n, int64_t c, int k) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * c) return;
  const int64_t t = i / c, j = i % c;
  float sum = 0.0f;
  for (int q = 0; q < k; ++q) {
    const int32_t r = choice_row[t * k + q];
    if (r < 0) continue;
    sum += (probs ? probs[t * k + q] : 1.0f) * to_f32(in[int64_t(r) * c + j]);
  }
  out[i] = from_f32<T>(sum);
}

template <typename T>
__global__ void unpermute_dyp_kernel(const T* __restrict__ dy, const int32_t* __restrict__ row_choice,
                                     const float* __restrict__ probs, T* __restrict__ dyp, int64_t rows, int64_t c,
                                     int k) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * c) return;
  const int64_t r = i / c, j = i % c;
  const int32_t choice = row_choice[r];
  dyp[i] = choice < 0 ? from_f32<T>(0.0f) : from_f32<T>(probs[choice] * to_f32(dy[int64_t(choice / k) * c + j]));
}

// One warp per (token, choice): dprobs[t, q] = dy[t] . yp[choice_row[t, q]].
template <typename T>
__global__ void unpermute_dprobs_kernel(const T* __restrict__ dy, const T* __restrict__ yp,
                                        const int32_t* __restrict__ choice_row, float* __restrict__ dprobs,
                                        int64_t choices, int64_t c, int k) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= choices) return;
  const int32_t r = choice_row[w];
  float sum = 0.0f;
  if (r >= 0) {
    const T* g = dy + (w / k) * c;
    const T* v = yp + int64_t(r) * c;
    for (int64_t j = lane; j < c; j += 32) sum += to_f32(g[j]) * to_f32(v[j]);
  }
  sum = warp_sum(sum);
  if (lane == 0) dprobs[w] = sum;
}

}  // namespace

void moe_permute_forward(const Context& ctx, const Tensor& x, const MoeRowMap& map, const Tensor& xp) {
  dispatch_float(x.dtype(), "moe_permute_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t total = xp.numel();
    if (total == 0) return;
    permute_kernel<T><<<ceil_div(total, kThreads), kThreads, 0, stream_of(ctx)>>>(
        x.data_as<T>(), map.row_choice.data_as<int32_t>(), xp.data_as<T>(), xp.dim(0), xp.dim(1),
        int(map.choice_row.dim(1)));
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void moe_permute_backward(const Context& ctx, const Tensor& dxp, const MoeRowMap& map, const Tensor& dx) {
  dispatch_float(dxp.dtype(), "moe_permute_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t total = dx.numel();
    if (total == 0) return;
    gather_sum_kernel<T><<<ceil_div(total, kThreads), kThreads, 0, stream_of(ctx)>>>(
        dxp.data_as<T>(), map.choice_row.data_as<int32_t>(), nullptr, dx.data_as<T>(), dx.dim(0), dx.dim(1),
        int(map.choice_row.dim(1)));
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void moe_unpermute_forward(const Context& ctx, const Tensor& yp, const MoeRowMap& map, const Tensor& probs,
                           const Tensor& y) {
  dispatch_float(yp.dtype(), "moe_unpermute_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t total = y.numel();
    if (total == 0) return;
    gather_sum_kernel<T><<<ceil_div(total, kThreads), kThreads, 0, stream_of(ctx)>>>(
        yp.data_as<T>(), map.choice_row.data_as<int32_t>(), probs.data_as<float>(), y.data_as<T>(), y.dim(0), y.dim(1),
        int(map.choice_row.dim(1)));
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void moe_unpermute_backward(const Context& ctx, const Tensor& dy, const Tensor& yp, const MoeRowMap& map,
                            const Tensor& probs, const Tensor& dyp, const Tensor& dprobs) {
  dispatch_float(dy.dtype(), "moe_unpermute_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int k = int(map.choice_row.dim(1));
    cudaStream_t stream = stream_of(ctx);
    if (dyp.numel() > 0) {
      unpermute_dyp_kernel<T><<<ceil_div(dyp.numel(), kThreads), kThreads, 0, stream>>>(
          dy.data_as<T>(), map.row_choice.data_as<int32_t>(), probs.data_as<float>(), dyp.data_as<T>(), dyp.dim(0),
          dyp.dim(1), k);
      TROUPE_CUDA_CHECK_LAUNCH();
    }
    const int64_t choices = dprobs.numel();
    if (choices == 0) return;
    unpermute_dprobs_kernel<T><<<ceil_div(choices * 32, kThreads), kThreads, 0, stream>>>(
        dy.data_as<T>(), yp.data_as<T>(), map.choice_row.data_as<int32_t>(), dprobs.data_as<float>(), choices,
        dy.dim(1), k);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
