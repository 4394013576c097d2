// The router's auxiliary losses on CUDA: one thread per token row (rows hold E experts, a few
// dozen to a few hundred), per-row partial sums into a buffer, and one block that adds them
// in a fixed order (in double, as the CPU reference does), so the loss is the same bits every
// run. Token counts use integer-valued f32 atomics: exact in any order.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_topk.cuh"
#include "kernels/cuda/stream_buffer.cuh"
#include "kernels/moe_router_losses.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kSumThreads = 512;

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// What turns a row's logits into its balance scores: s_j = f(l_j) / denom.
struct BalanceRow {
  float max, denom;
};
__device__ BalanceRow balance_row(const float* l, int e, MoeScoreFunction fn) {
  if (fn == MoeScoreFunction::softmax) {
    float mx = l[0];
    for (int j = 1; j < e; ++j) mx = fmaxf(mx, l[j]);
    float sum = 0.0f;
    for (int j = 0; j < e; ++j) sum += expf(l[j] - mx);
    return {mx, sum};
  }
  float sum = 0.0f;
  for (int j = 0; j < e; ++j) sum += sigmoidf(l[j]);
  return {0.0f, sum + 1e-20f};
}
__device__ __forceinline__ float balance_score(const float* l, int j, MoeScoreFunction fn, BalanceRow r) {
  return (fn == MoeScoreFunction::softmax ? expf(l[j] - r.max) : sigmoidf(l[j])) / r.denom;
}

// tokens[g, e] += 1 for each of the row's top-k experts on the balance scores; the same picks
// and tie rule (lower expert first) as the CPU's partial_sort.
__global__ void balance_count_kernel(const float* __restrict__ logits, float* __restrict__ tokens, int64_t n, int e,
                                     int k, int64_t group_tokens, MoeScoreFunction fn) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n) return;
  const float* l = logits + row * e;
  const BalanceRow br = balance_row(l, e, fn);
  float* count = tokens + (row / group_tokens) * e;
  int32_t pick[kMaxTopk];
  moe_pick_topk(
      e, k, [&](int j) { return balance_score(l, j, fn, br); }, pick);
  for (int i = 0; i < k; ++i) atomicAdd(count + pick[i], 1.0f);
}

// partial[row] = sum_e s[row, e] * tokens[g(row), e]
__global__ void balance_partial_kernel(const float* __restrict__ logits, const float* __restrict__ tokens,
                                       double* __restrict__ partial, int64_t n, int e, int64_t group_tokens,
                                       MoeScoreFunction fn) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n) return;
  const float* l = logits + row * e;
  const BalanceRow br = balance_row(l, e, fn);
  const float* count = tokens + (row / group_tokens) * e;
  double sum = 0.0;
  for (int j = 0; j < e; ++j) sum += double(balance_score(l, j, fn, br)) * double(count[j]);
  partial[row] = sum;
}

// log(sum_j exp(l[j])) of one row of e logits, in double (the z-loss and its gradient agree).
__device__ double row_logsumexp(const float* l, int e) {
  float mx = l[0];
  for (int j = 1; j < e; ++j) mx = fmaxf(mx, l[j]);
  double s = 0.0;
  for (int j = 0; j < e; ++j) s += exp(double(l[j] - mx));
  return double(mx) + log(s);
}

// partial[row] = logsumexp(l_row)^2
__global__ void z_partial_kernel(const float* __restrict__ logits, double* __restrict__ partial, int64_t n, int e) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n) return;
  const double lse = row_logsumexp(logits + row * e, e);
  partial[row] = lse * lse;
}

// loss[0] = scale * sum of partial[0..n): each thread a fixed stride, then a fixed tree.
__global__ void sum_kernel(const double* __restrict__ partial, int64_t n, double scale, float* __restrict__ loss) {
  __shared__ double shared[kSumThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) s += partial[i];
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int width = kSumThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = float(shared[0] * scale);
}

__global__ void balance_backward_kernel(const float* __restrict__ logits, const float* __restrict__ tokens,
                                        float* __restrict__ dlogits, int64_t n, int e, int64_t group_tokens,
                                        MoeScoreFunction fn, float base) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n) return;
  const float* l = logits + row * e;
  const float* count = tokens + (row / group_tokens) * e;
  float* dl = dlogits + row * e;
  const BalanceRow br = balance_row(l, e, fn);
  float dot = 0.0f;
  for (int j = 0; j < e; ++j) dot += base * count[j] * balance_score(l, j, fn, br);
  for (int j = 0; j < e; ++j) {
    const float g = base * count[j];
    if (fn == MoeScoreFunction::softmax) {
      dl[j] += balance_score(l, j, fn, br) * (g - dot);
    } else {
      const float sg = sigmoidf(l[j]);
      dl[j] += (g - dot) / br.denom * sg * (1.0f - sg);
    }
  }
}

__global__ void z_backward_kernel(const float* __restrict__ logits, float* __restrict__ dlogits, int64_t n, int e,
                                  double coeff_over_n) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n) return;
  const float* l = logits + row * e;
  const double lse = row_logsumexp(l, e);
  const double scale = coeff_over_n * 2.0 * lse;
  for (int j = 0; j < e; ++j) dlogits[row * e + j] += float(scale * exp(double(l[j]) - lse));
}

void expect_small_topk(const char* op, int k) {
  TROUPE_CHECK(k <= kMaxTopk, op, ": the CUDA kernel supports top-k up to ", kMaxTopk, ", got ", k);
}

}  // namespace

void moe_balance_counts(const Context& ctx, const Tensor& logits, MoeScoreFunction fn, int topk, int64_t group_tokens,
                        const Tensor& tokens) {
  expect_small_topk("moe_balance_counts", topk);
  cudaStream_t stream = stream_of(ctx);
  const int64_t n = logits.dim(0);
  TROUPE_CUDA_CHECK(cudaMemsetAsync(tokens.data(), 0, tokens.nbytes(), stream));
  if (n == 0) return;
  balance_count_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream>>>(logits.data_as<float>(), tokens.data_as<float>(),
                                                                       n, int(logits.dim(1)), topk, group_tokens, fn);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_balance_loss_forward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                              int topk, int64_t group_size, float coeff, const Tensor& loss) {
  cudaStream_t stream = stream_of(ctx);
  const int64_t n = logits.dim(0), groups = tokens.dim(0), group_tokens = n / groups;
  const int e = int(logits.dim(1));
  TROUPE_CUDA_CHECK(cudaMemsetAsync(loss.data(), 0, loss.nbytes(), stream));
  if (n == 0) return;
  StreamBuffer<double> partial(stream, size_t(n));
  balance_partial_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream>>>(
      logits.data_as<float>(), tokens.data_as<float>(), partial.get(), n, e, group_tokens, fn);
  TROUPE_CUDA_CHECK_LAUNCH();
  const double scale = double(e) * coeff / (double(topk) * double(group_size) * double(group_size) * double(groups));
  sum_kernel<<<1, kSumThreads, 0, stream>>>(partial.get(), n, scale, loss.data_as<float>());
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_balance_loss_backward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                               int topk, int64_t group_size, float coeff, const Tensor& dlogits) {
  const int64_t n = logits.dim(0), groups = tokens.dim(0), group_tokens = n / groups;
  const int e = int(logits.dim(1));
  if (n == 0) return;
  const double base = double(e) * coeff / (double(topk) * double(group_size) * double(group_size) * double(groups));
  balance_backward_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
      logits.data_as<float>(), tokens.data_as<float>(), dlogits.data_as<float>(), n, e, group_tokens, fn, float(base));
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_z_loss_forward(const Context& ctx, const Tensor& logits, float coeff, int64_t total_rows, const Tensor& loss) {
  cudaStream_t stream = stream_of(ctx);
  const int64_t n = logits.dim(0);
  TROUPE_CUDA_CHECK(cudaMemsetAsync(loss.data(), 0, loss.nbytes(), stream));
  if (n == 0) return;
  StreamBuffer<double> partial(stream, size_t(n));
  z_partial_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream>>>(logits.data_as<float>(), partial.get(), n,
                                                                   int(logits.dim(1)));
  TROUPE_CUDA_CHECK_LAUNCH();
  sum_kernel<<<1, kSumThreads, 0, stream>>>(partial.get(), n, double(coeff) / double(total_rows),
                                            loss.data_as<float>());
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_z_loss_backward(const Context& ctx, const Tensor& logits, float coeff, int64_t total_rows,
                         const Tensor& dlogits) {
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  z_backward_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
      logits.data_as<float>(), dlogits.data_as<float>(), n, int(logits.dim(1)), double(coeff) / double(total_rows));
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
