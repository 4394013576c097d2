#include "kernels/vocab_parallel_cross_entropy.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// logits [N, Vl] (f32 on the CPU) with 0 <= valid <= Vl; returns N.
int64_t expect_logits(const Context& ctx, const char* op, const Tensor& logits, int64_t valid) {
  expect_device(op, "logits", ctx, logits);
  if (!ctx.is_cuda()) expect_dtype(op, "logits", logits, DType::f32);
  TROUPE_CHECK(logits.ndim() == 2, op, ": logits must be [N, Vl], got ", logits.str());
  TROUPE_CHECK(valid >= 0 && valid <= logits.dim(1), op, ": valid must be in [0, Vl = ", logits.dim(1), "], got ",
               valid);
  return logits.dim(0);
}

// A per-row statistic: f32 [n] on ctx's device.
void expect_row_stat(const Context& ctx, const char* op, const char* arg, const Tensor& t, int64_t n) {
  expect_device(op, arg, ctx, t);
  expect_dtype(op, arg, t, DType::f32);
  expect_shape(op, arg, t, {n});
}

// Global target ids (or -1), i32 [n], for the shard whose first column is vocab_start.
void expect_targets(const Context& ctx, const char* op, const Tensor& targets, int64_t n, int64_t vocab_start) {
  expect_device(op, "targets", ctx, targets);
  expect_dtype(op, "targets", targets, DType::i32);
  expect_shape(op, "targets", targets, {n});
  TROUPE_CHECK(vocab_start >= 0, op, ": vocab_start must be >= 0, got ", vocab_start);
}

}  // namespace

void vocab_parallel_max(const Context& ctx, const Tensor& logits, int64_t valid, const Tensor& row_max) {
  constexpr const char* op = "vocab_parallel_max";
  const int64_t n = expect_logits(ctx, op, logits, valid);
  expect_row_stat(ctx, op, "row_max", row_max, n);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::vocab_parallel_max(ctx, logits, valid, row_max));
  else
    cpu::vocab_parallel_max(logits, valid, row_max);
}

void vocab_parallel_sum_exp(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit) {
  constexpr const char* op = "vocab_parallel_sum_exp";
  const int64_t n = expect_logits(ctx, op, logits, valid);
  expect_targets(ctx, op, targets, n, vocab_start);
  expect_row_stat(ctx, op, "row_max", row_max, n);
  expect_row_stat(ctx, op, "sum_exp", sum_exp, n);
  expect_row_stat(ctx, op, "target_logit", target_logit, n);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(
        cuda::vocab_parallel_sum_exp(ctx, logits, targets, vocab_start, valid, row_max, sum_exp, target_logit));
  else
    cpu::vocab_parallel_sum_exp(logits, targets, vocab_start, valid, row_max, sum_exp, target_logit);
}

void vocab_parallel_loss(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                         int64_t valid, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                         float grad_scale, bool backward, const Tensor& losses) {
  constexpr const char* op = "vocab_parallel_loss";
  const int64_t n = expect_logits(ctx, op, logits, valid);
  expect_targets(ctx, op, targets, n, vocab_start);
  expect_row_stat(ctx, op, "row_max", row_max, n);
  expect_row_stat(ctx, op, "sum_exp", sum_exp, n);
  expect_row_stat(ctx, op, "target_logit", target_logit, n);
  expect_row_stat(ctx, op, "losses", losses, n);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::vocab_parallel_loss(ctx, logits, targets, vocab_start, valid, row_max, sum_exp, target_logit,
                                             grad_scale, backward, losses));
  else
    cpu::vocab_parallel_loss(logits, targets, vocab_start, valid, row_max, sum_exp, target_logit, grad_scale, backward,
                             losses);
}

}  // namespace troupe
