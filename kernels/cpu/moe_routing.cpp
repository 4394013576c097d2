#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/parallel.hpp"
#include "kernels/moe_routing.hpp"

namespace troupe::cpu {

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// softmax of v[0..n) into out (max-subtracted).
void softmax(const float* v, int64_t n, float* out) {
  float mx = v[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, v[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(v[i] - mx);
    sum += out[i];
  }
  for (int64_t i = 0; i < n; ++i) out[i] /= sum;
}

}  // namespace

void moe_topk_forward(const Tensor& logits, const Tensor& expert_bias, const MoeTopk& t, const Tensor& probs,
                      const Tensor& experts) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  const int k = t.topk;
  const float* bias = expert_bias.defined() ? expert_bias.data_as<float>() : nullptr;
#pragma omp parallel for if (worth_parallel(n * e)) schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const float* l = logits.data_as<float>() + row * e;
    std::vector<float> score(static_cast<size_t>(e), 0.0f), select(static_cast<size_t>(e), 0.0f);
    if (t.score_function == MoeScoreFunction::sigmoid) {
      for (int64_t j = 0; j < e; ++j) {
        score[size_t(j)] = sigmoid(l[j]);
        select[size_t(j)] = score[size_t(j)] + (bias ? bias[j] : 0.0f);
      }
    } else if (t.pre_softmax) {
      softmax(l, e, score.data());
      select = score;
    } else {
      std::copy(l, l + e, select.begin());
    }
    std::vector<int32_t> order(static_cast<size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return select[size_t(a)] > select[size_t(b)] || (select[size_t(a)] == select[size_t(b)] && a < b);
    });
    float* p = probs.data_as<float>() + row * k;
    int32_t* idx = experts.data_as<int32_t>() + row * k;
    for (int i = 0; i < k; ++i) idx[i] = order[size_t(i)];
    if (t.score_function == MoeScoreFunction::sigmoid) {
      float sum = 0.0f;
      for (int i = 0; i < k; ++i) sum += score[size_t(idx[i])];
      for (int i = 0; i < k; ++i) p[i] = k > 1 ? score[size_t(idx[i])] / (sum + 1e-20f) : score[size_t(idx[i])];
    } else if (t.pre_softmax) {
      for (int i = 0; i < k; ++i) p[i] = score[size_t(idx[i])];
    } else {
      std::vector<float> picked(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) picked[size_t(i)] = l[idx[i]];
      softmax(picked.data(), k, p);
    }
    if (t.scaling_factor > 0)
      for (int i = 0; i < k; ++i) p[i] *= t.scaling_factor;
  }
}

void moe_topk_backward(const Tensor& logits, const Tensor& experts, const Tensor& dprobs, const MoeTopk& t,
                       const Tensor& dlogits) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  const int k = t.topk;
  const float scale = t.scaling_factor > 0 ? t.scaling_factor : 1.0f;
#pragma omp parallel for if (worth_parallel(n * e)) schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const float* l = logits.data_as<float>() + row * e;
    const int32_t* idx = experts.data_as<int32_t>() + row * k;
    const float* dp = dprobs.data_as<float>() + row * k;
    float* dl = dlogits.data_as<float>() + row * e;
    std::vector<float> g(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) g[size_t(i)] = dp[i] * scale;
    if (t.score_function == MoeScoreFunction::sigmoid) {
      std::vector<float> s(static_cast<size_t>(k));
      float sum = 0.0f;
      for (int i = 0; i < k; ++i) sum += (s[size_t(i)] = sigmoid(l[idx[i]]));
      const float denom = k > 1 ? sum + 1e-20f : 1.0f;
      float dot = 0.0f;
      if (k > 1)
        for (int i = 0; i < k; ++i) dot += g[size_t(i)] * s[size_t(i)] / denom;
      for (int i = 0; i < k; ++i) {
        const float ds = (g[size_t(i)] - dot) / denom;
        dl[idx[i]] += ds * s[size_t(i)] * (1.0f - s[size_t(i)]);
      }
    } else if (t.pre_softmax) {
      std::vector<float> s(static_cast<size_t>(e)), gfull(static_cast<size_t>(e), 0.0f);
      softmax(l, e, s.data());
      float dot = 0.0f;
      for (int i = 0; i < k; ++i) {
        gfull[size_t(idx[i])] += g[size_t(i)];
        dot += g[size_t(i)] * s[size_t(idx[i])];
      }
      for (int64_t j = 0; j < e; ++j) dl[j] += s[size_t(j)] * (gfull[size_t(j)] - dot);
    } else {
      std::vector<float> picked(static_cast<size_t>(k)), p(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) picked[size_t(i)] = l[idx[i]];
      softmax(picked.data(), k, p.data());
      float dot = 0.0f;
      for (int i = 0; i < k; ++i) dot += g[size_t(i)] * p[size_t(i)];
      for (int i = 0; i < k; ++i) dl[idx[i]] += p[size_t(i)] * (g[size_t(i)] - dot);
    }
  }
}

}  // namespace troupe::cpu
