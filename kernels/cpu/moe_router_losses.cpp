#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/moe_router_losses.hpp"

namespace troupe::cpu {

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// The scores the load-balancing loss uses, for one row: softmax over all experts, or sigmoid
// normalized over all experts.
void balance_scores(const float* l, int64_t e, MoeScoreFunction fn, float* scores) {
  if (fn == MoeScoreFunction::softmax) {
    const float mx = *std::max_element(l, l + e);
    float sum = 0.0f;
    for (int64_t j = 0; j < e; ++j) sum += (scores[j] = std::exp(l[j] - mx));
    for (int64_t j = 0; j < e; ++j) scores[j] /= sum;
  } else {
    float sum = 0.0f;
    for (int64_t j = 0; j < e; ++j) sum += (scores[j] = sigmoid(l[j]));
    for (int64_t j = 0; j < e; ++j) scores[j] /= sum + 1e-20f;
  }
}

// Indices of the k largest of v[0..e), ties to the lower index (torch.topk's set).
std::vector<int64_t> top_indices(const float* v, int64_t e, int k) {
  std::vector<int64_t> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  order.resize(size_t(k));
  return order;
}

double logsumexp(const float* l, int64_t e) {
  const float mx = *std::max_element(l, l + e);
  double s = 0;
  for (int64_t j = 0; j < e; ++j) s += std::exp(double(l[j] - mx));
  return double(mx) + std::log(s);
}

}  // namespace

void moe_balance_counts(const Tensor& logits, MoeScoreFunction fn, int topk, int64_t group_tokens,
                        const Tensor& tokens) {
  const int64_t n = logits.dim(0), e = logits.dim(1), groups = n / group_tokens;
  float* count = tokens.data_as<float>();
  std::fill(count, count + groups * e, 0.0f);
  std::vector<float> s(static_cast<size_t>(e));
  for (int64_t row = 0; row < n; ++row) {
    balance_scores(logits.data_as<float>() + row * e, e, fn, s.data());
    for (int64_t j : top_indices(s.data(), e, topk)) count[(row / group_tokens) * e + j] += 1.0f;
  }
}

void moe_balance_loss_forward(const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn, int topk,
                              int64_t group_size, float coeff, const Tensor& loss) {
  const int64_t n = logits.dim(0), e = logits.dim(1), groups = tokens.dim(0), group_tokens = n / groups;
  const float* count = tokens.data_as<float>();
  std::vector<float> s(static_cast<size_t>(e));
  std::vector<double> score_sum(size_t(groups * e), 0.0);  // these rows' sum of s per group and expert
  for (int64_t row = 0; row < n; ++row) {
    balance_scores(logits.data_as<float>() + row * e, e, fn, s.data());
    for (int64_t j = 0; j < e; ++j) score_sum[size_t((row / group_tokens) * e + j)] += s[size_t(j)];
  }
  double total = 0;
  for (size_t i = 0; i < score_sum.size(); ++i) total += score_sum[i] * count[i];
  loss.data_as<float>()[0] =
      float(total * double(e) * coeff / (double(topk) * double(group_size) * double(group_size) * double(groups)));
}

void moe_balance_loss_backward(const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn, int topk,
                               int64_t group_size, float coeff, const Tensor& dlogits) {
  // d(loss)/d(score[n, j]) = coeff * E / (K * S^2 * G) * tokens[g(n), j]
  const int64_t n = logits.dim(0), e = logits.dim(1), groups = tokens.dim(0), group_tokens = n / groups;
  const double base = double(e) * coeff / (double(topk) * double(group_size) * double(group_size) * double(groups));
  std::vector<float> g(static_cast<size_t>(e)), s(static_cast<size_t>(e));
  for (int64_t row = 0; row < n; ++row) {
    const float* l = logits.data_as<float>() + row * e;
    const float* count = tokens.data_as<float>() + (row / group_tokens) * e;
    float* dl = dlogits.data_as<float>() + row * e;
    for (int64_t j = 0; j < e; ++j) g[size_t(j)] = float(base * count[j]);
    balance_scores(l, e, fn, s.data());
    float dot = 0.0f;
    for (int64_t j = 0; j < e; ++j) dot += g[size_t(j)] * s[size_t(j)];
    if (fn == MoeScoreFunction::softmax) {
      for (int64_t j = 0; j < e; ++j) dl[j] += s[size_t(j)] * (g[size_t(j)] - dot);
      continue;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < e; ++j) sum += sigmoid(l[j]);
    for (int64_t j = 0; j < e; ++j) {
      const float sg = sigmoid(l[j]);
      dl[j] += (g[size_t(j)] - dot) / (sum + 1e-20f) * sg * (1.0f - sg);
    }
  }
}

void moe_z_loss_forward(const Tensor& logits, float coeff, int64_t total_rows, const Tensor& loss) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  double sum = 0;
  for (int64_t row = 0; row < n; ++row) {
    const double lse = logsumexp(logits.data_as<float>() + row * e, e);
    sum += lse * lse;
  }
  loss.data_as<float>()[0] = n > 0 ? float(coeff * sum / double(total_rows)) : 0.0f;
}

void moe_z_loss_backward(const Tensor& logits, float coeff, int64_t total_rows, const Tensor& dlogits) {
  // z = coeff / N * sum_n lse_n^2:  dz/dl[n, j] = coeff / N * 2 lse_n softmax(l_n)_j.
  const int64_t n = logits.dim(0), e = logits.dim(1);
  for (int64_t row = 0; row < n; ++row) {
    const float* l = logits.data_as<float>() + row * e;
    const double lse = logsumexp(l, e);
    const double scale = double(coeff) / double(total_rows) * 2.0 * lse;
    for (int64_t j = 0; j < e; ++j)
      dlogits.data_as<float>()[row * e + j] += float(scale * std::exp(double(l[j]) - lse));
  }
}

}  // namespace troupe::cpu
