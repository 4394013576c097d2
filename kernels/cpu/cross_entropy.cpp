#include <algorithm>
#include <cmath>

#include "base/check.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

namespace {
// Checked before the parallel loops (an exception must not leave an OpenMP region).
void check_targets(const char* op, const Tensor& targets, int64_t vocab_size) {
  const int32_t* t = targets.data_as<int32_t>();
  for (int64_t n = 0; n < targets.numel(); ++n)
    TROUPE_CHECK(t[n] == -1 || (t[n] >= 0 && t[n] < vocab_size), op, ": targets[", n, "] = ", t[n], " is outside [0, ",
                 vocab_size, ") and not -1 (ignored)");
}

// The row's max and log(sum_{j < V} exp(x[j] - max)): the max subtracted, no exp overflows, and
// the loss (max - x[t]) + log_sum never subtracts two large numbers.
struct RowLogSumExp {
  float max;
  double log_sum;
};
RowLogSumExp row_logsumexp(const float* x, int64_t vocab_size) {
  const float max = *std::max_element(x, x + vocab_size);
  double sum = 0.0;
  for (int64_t j = 0; j < vocab_size; ++j) sum += std::exp(double(x[j] - max));
  return {max, std::log(sum)};
}

// Fills losses; when grad_scale is given, overwrites logits with dlogits.
void cross_entropy(const char* op, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                   const float* grad_scale, const Tensor& losses) {
  check_targets(op, targets, vocab_size);
  const int64_t rows = logits.dim(0), padded_vocab = logits.dim(1);
  const int32_t* target = targets.data_as<int32_t>();
  float* loss = losses.data_as<float>();
#pragma omp parallel for if (worth_parallel(rows * padded_vocab)) schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    float* x = logits.data_as<float>() + n * padded_vocab;
    const int32_t t = target[n];
    if (t < 0) {  // ignored row
      loss[n] = 0.0f;
      if (grad_scale) std::fill(x, x + padded_vocab, 0.0f);
      continue;
    }
    const RowLogSumExp lse = row_logsumexp(x, vocab_size);
    loss[n] = float(double(lse.max - x[t]) + lse.log_sum);
    if (!grad_scale) continue;
    for (int64_t j = 0; j < vocab_size; ++j) {
      const float prob = float(std::exp(double(x[j] - lse.max) - lse.log_sum));
      x[j] = (prob - (j == t ? 1.0f : 0.0f)) * *grad_scale;
    }
    std::fill(x + vocab_size, x + padded_vocab, 0.0f);
  }
}
}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_size, const Tensor& losses) {
  cross_entropy("cross_entropy_forward", logits, targets, vocab_size, nullptr, losses);
}

void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, int64_t vocab_size, float grad_scale,
                                    const Tensor& losses) {
  cross_entropy("cross_entropy_forward_backward", logits, targets, vocab_size, &grad_scale, losses);
}

}  // namespace troupe::cpu
