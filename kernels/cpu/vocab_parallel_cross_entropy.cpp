// Vocab-parallel cross-entropy reference: f32 logits, sums of exponentials in double (as in
// cpu/cross_entropy.cpp), targets checked before any work (an exception must not leave an
// OpenMP region).
#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"

namespace troupe::cpu {

namespace {

// Throws on the first target this rank can tell is no token: negative other than -1, or at or
// past its first padding column (a shard holding padding, valid < Vl, ends the vocabulary).
void check_targets(const char* op, const Tensor& targets, int64_t vocab_start, int64_t valid, int64_t cols) {
  const int32_t* t = targets.data_as<int32_t>();
  const bool has_padding = valid < cols;
  const int64_t end = has_padding ? vocab_start + valid : std::numeric_limits<int64_t>::max();
  for (int64_t n = 0; n < targets.numel(); ++n)
    TROUPE_CHECK(t[n] == -1 || (t[n] >= 0 && t[n] < end), op, ": targets[", n, "] = ", t[n],
                 " is neither -1 (ignored) nor a token id", has_padding ? str_cat(" in [0, ", end, ")") : "");
}

}  // namespace

void vocab_parallel_max(const Tensor& logits, int64_t valid, const Tensor& row_max) {
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  float* out = row_max.data_as<float>();
#pragma omp parallel for if (worth_parallel(rows * valid)) schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    const float* x = logits.data_as<float>() + n * cols;
    out[n] = valid > 0 ? *std::max_element(x, x + valid) : -std::numeric_limits<float>::infinity();
  }
}

void vocab_parallel_sum_exp(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t valid,
                            const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit) {
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  check_targets("vocab_parallel_sum_exp", targets, vocab_start, valid, cols);
  const int32_t* target = targets.data_as<int32_t>();
  const float* max = row_max.data_as<float>();
  float* sum = sum_exp.data_as<float>();
  float* picked = target_logit.data_as<float>();
#pragma omp parallel for if (worth_parallel(rows * valid)) schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    const float* x = logits.data_as<float>() + n * cols;
    double s = 0.0;
    for (int64_t j = 0; j < valid; ++j) s += std::exp(double(x[j] - max[n]));
    sum[n] = float(s);
    const int64_t col = int64_t(target[n]) - vocab_start;  // negative for ignored rows (-1)
    picked[n] = target[n] >= 0 && col >= 0 && col < valid ? x[col] : 0.0f;
  }
}

void vocab_parallel_loss(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t valid,
                         const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit, float grad_scale,
                         bool backward, const Tensor& losses) {
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  check_targets("vocab_parallel_loss", targets, vocab_start, valid, cols);
  const int32_t* target = targets.data_as<int32_t>();
  const float* max = row_max.data_as<float>();
  const float* sum = sum_exp.data_as<float>();
  const float* picked = target_logit.data_as<float>();
  float* loss = losses.data_as<float>();
#pragma omp parallel for if (backward && worth_parallel(rows * cols)) schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    float* x = logits.data_as<float>() + n * cols;
    if (target[n] == -1) {  // ignored row
      loss[n] = 0.0f;
      if (backward) std::fill(x, x + cols, 0.0f);
      continue;
    }
    // As cpu/cross_entropy.cpp: (max - x[t]) + log_sum never subtracts two large numbers.
    const double log_sum = std::log(double(sum[n]));
    loss[n] = float(double(max[n] - picked[n]) + log_sum);
    if (!backward) continue;
    const int64_t target_col = int64_t(target[n]) - vocab_start;  // outside [0, valid): another rank's
    for (int64_t j = 0; j < valid; ++j) {
      const float prob = float(std::exp(double(x[j] - max[n]) - log_sum));
      x[j] = (prob - (j == target_col ? 1.0f : 0.0f)) * grad_scale;
    }
    std::fill(x + valid, x + cols, 0.0f);
  }
}

}  // namespace troupe::cpu
