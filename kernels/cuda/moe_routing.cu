// MoE top-k routing on CUDA: one thread per token row. Rows are short (E experts, k picks), so a
// thread scans its row k times to pick, the same order and tie rule as the CPU reference.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_topk.cuh"
#include "kernels/moe_routing.hpp"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

struct RowSoftmax {
  float max, sum;
};
__device__ RowSoftmax row_softmax(const float* l, int e) {
  float mx = l[0];
  for (int j = 1; j < e; ++j) mx = fmaxf(mx, l[j]);
  float sum = 0.0f;
  for (int j = 0; j < e; ++j) sum += expf(l[j] - mx);
  return {mx, sum};
}

// The score a pick is made on (see kernels/moe_routing.hpp).
__device__ __forceinline__ float select_score(const float* l, const float* bias, int j, MoeScoreFunction fn,
                                              bool pre_softmax, RowSoftmax sm) {
  if (fn == MoeScoreFunction::sigmoid) return sigmoidf(l[j]) + (bias ? bias[j] : 0.0f);
  if (pre_softmax) return expf(l[j] - sm.max) / sm.sum;
  return l[j];
}

__global__ void topk_forward_kernel(const float* __restrict__ logits, const float* __restrict__ bias,
                                    float* __restrict__ probs, int32_t* __restrict__ experts, int64_t n, int e, int k,
                                    MoeScoreFunction fn, bool pre_softmax, float scaling) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n) return;
  const float* l = logits + row * e;
  const bool sm_needed = fn == MoeScoreFunction::softmax && pre_softmax;
  const RowSoftmax sm = sm_needed ? row_softmax(l, e) : RowSoftmax{0.0f, 1.0f};
  int32_t pick[kMaxTopk];
  moe_pick_topk(
      e, k, [&](int j) { return select_score(l, bias, j, fn, pre_softmax, sm); }, pick);
  float p[kMaxTopk];
  if (fn == MoeScoreFunction::sigmoid) {
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += (p[i] = sigmoidf(l[pick[i]]));
    if (k > 1)
      for (int i = 0; i < k; ++i) p[i] = p[i] / (sum + 1e-20f);
  } else if (pre_softmax) {
    for (int i = 0; i < k; ++i) p[i] = expf(l[pick[i]] - sm.max) / sm.sum;
  } else {
    float mx = l[pick[0]];
    for (int i = 1; i < k; ++i) mx = fmaxf(mx, l[pick[i]]);
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += (p[i] = expf(l[pick[i]] - mx));
    for (int i = 0; i < k; ++i) p[i] /= sum;
  }
  for (int i = 0; i < k; ++i) {
    probs[row * k + i] = scaling > 0.0f ? p[i] * scaling : p[i];
    experts[row * k + i] = pick[i];
  }
}

__global__ void topk_backward_kernel(const float* __restrict__ logits, const int32_t* __restrict__ experts,
                                     const float* __restrict__ dprobs, float* __restrict__ dlogits, int64_t n, int e,
                                     int k, MoeScoreFunction fn, bool pre_softmax, float scaling) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n) return;
  const float* l = logits + row * e;
  const int32_t* idx = experts + row * k;
  float* dl = dlogits + row * e;
  const float scale = scaling > 0.0f ? scaling : 1.0f;
  float g[kMaxTopk];
  for (int i = 0; i < k; ++i) g[i] = dprobs[row * k + i] * scale;
  if (fn == MoeScoreFunction::sigmoid) {
    float s[kMaxTopk];
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += (s[i] = sigmoidf(l[idx[i]]));
    const float denom = k > 1 ? sum + 1e-20f : 1.0f;
    float dot = 0.0f;
    if (k > 1)
      for (int i = 0; i < k; ++i) dot += g[i] * s[i] / denom;
    for (int i = 0; i < k; ++i) dl[idx[i]] += (g[i] - dot) / denom * s[i] * (1.0f - s[i]);
  } else if (pre_softmax) {
    const RowSoftmax sm = row_softmax(l, e);
    float dot = 0.0f;
    for (int i = 0; i < k; ++i) dot += g[i] * (expf(l[idx[i]] - sm.max) / sm.sum);
    for (int j = 0; j < e; ++j) {
      float gj = 0.0f;
      for (int i = 0; i < k; ++i) gj += idx[i] == j ? g[i] : 0.0f;
      dl[j] += expf(l[j] - sm.max) / sm.sum * (gj - dot);
    }
  } else {
    float p[kMaxTopk];
    float mx = l[idx[0]];
    for (int i = 1; i < k; ++i) mx = fmaxf(mx, l[idx[i]]);
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += (p[i] = expf(l[idx[i]] - mx));
    float dot = 0.0f;
    for (int i = 0; i < k; ++i) dot += g[i] * (p[i] /= sum);
    for (int i = 0; i < k; ++i) dl[idx[i]] += p[i] * (g[i] - dot);
  }
}

void expect_small_topk(const char* op, int k) {
  TROUPE_CHECK(k <= kMaxTopk, op, ": the CUDA kernel supports top-k up to ", kMaxTopk, ", got ", k);
}

}  // namespace

void moe_topk_forward(const Context& ctx, const Tensor& logits, const Tensor& expert_bias, const MoeTopk& t,
                      const Tensor& probs, const Tensor& experts) {
  expect_small_topk("moe_topk_forward", t.topk);
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  topk_forward_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
      logits.data_as<float>(), expert_bias.defined() ? expert_bias.data_as<float>() : nullptr, probs.data_as<float>(),
      experts.data_as<int32_t>(), n, int(logits.dim(1)), t.topk, t.score_function, t.pre_softmax, t.scaling_factor);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void moe_topk_backward(const Context& ctx, const Tensor& logits, const Tensor& experts, const Tensor& dprobs,
                       const MoeTopk& t, const Tensor& dlogits) {
  expect_small_topk("moe_topk_backward", t.topk);
  const int64_t n = logits.dim(0);
  if (n == 0) return;
  topk_backward_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
      logits.data_as<float>(), experts.data_as<int32_t>(), dprobs.data_as<float>(), dlogits.data_as<float>(), n,
      int(logits.dim(1)), t.topk, t.score_function, t.pre_softmax, t.scaling_factor);
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
