// Softmax cross-entropy over a vocabulary split across a tensor-parallel group (Megatron's
// vocab-parallel cross-entropy), in three steps with the group's all-reduces in between.
//
// Rank r holds logits [N, Vl]: columns [vocab_start, vocab_start + Vl) of the padded vocabulary
// (vocab_start = r * Vl). Only the first `valid` = clamp(vocab_size - vocab_start, 0, Vl) of them
// are real vocabulary; the rest is padding and never takes part. A target of -1 marks an
// ignored row (loss 0, gradient 0). With the all-reduces below, every rank gets
//   losses[n] = log(sum_exp[n]) + row_max[n] - target_logit[n] = logsumexp(logits[n, :V]) - logits[n, target]
// and, when backward, its columns of the gradient of sum_n(losses[n]) * grad_scale in place:
//   dlogits[n, j] = (exp(logits[n, j] - row_max[n]) / sum_exp[n] - [vocab_start + j == target[n]]) * grad_scale
// for j < valid, 0 on the padding — cross_entropy_forward_backward (kernels/cross_entropy.hpp),
// column block by column block.
//
//   vocab_parallel_max(ctx, logits, valid, row_max);
//   tp.all_reduce(ctx, row_max, ReduceOp::max);
//   vocab_parallel_sum_exp(ctx, logits, targets, vocab_start, valid, row_max, sum_exp, target_logit);
//   tp.all_reduce(ctx, sum_exp);       // sum_exp and target_logit may be the two halves of one
//   tp.all_reduce(ctx, target_logit);  // f32 [2, N] buffer (slices): then one all-reduce does both
//   vocab_parallel_loss(ctx, logits, targets, vocab_start, valid, row_max, sum_exp, target_logit,
//                       grad_scale, /*backward=*/true, losses);
//
// logits: [N, Vl] (f32 on the CPU; bf16/f16/f32 on CUDA); targets: i32 [N] (global ids, or -1);
// row_max, sum_exp, target_logit, losses: f32 [N]. 0 <= valid <= Vl, vocab_start >= 0.
// A target other than -1 that a rank can tell is no token (negative, or at or past its first
// padding column: ids >= V on a rank holding padding) is an error on the CPU (thrown); CUDA
// kernels cannot throw, so there it turns that rank's target_logit and gradient row NaN (and,
// through the all-reduce, every rank's loss). With V = Vp no rank holds padding, and a target
// >= V goes unnoticed (every rank's target_logit is 0).
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// row_max[n] = max over j < valid of logits[n, j]; -inf when valid == 0.
void vocab_parallel_max(const Context& ctx, const Tensor& logits, int64_t valid, const Tensor& row_max);
// With row_max the group's (all-reduced) max:
//   sum_exp[n] = sum over j < valid of exp(logits[n, j] - row_max[n]),
//   target_logit[n] = logits[n, target[n] - vocab_start] when that column is in [0, valid), else 0
//   (0 for ignored rows).
void vocab_parallel_sum_exp(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit);
// With the group's row_max, sum_exp and target_logit: losses (the same on every rank); when
// backward, logits <- dlogits in place (see above). backward = false leaves logits untouched.
void vocab_parallel_loss(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                         int64_t valid, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                         float grad_scale, bool backward, const Tensor& losses);

namespace cpu {
void vocab_parallel_max(const Tensor& logits, int64_t valid, const Tensor& row_max);
void vocab_parallel_sum_exp(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t valid,
                            const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit);
void vocab_parallel_loss(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t valid,
                         const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit, float grad_scale,
                         bool backward, const Tensor& losses);
}  // namespace cpu
namespace cuda {
void vocab_parallel_max(const Context& ctx, const Tensor& logits, int64_t valid, const Tensor& row_max);
void vocab_parallel_sum_exp(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit);
void vocab_parallel_loss(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                         int64_t valid, const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                         float grad_scale, bool backward, const Tensor& losses);
}  // namespace cuda

}  // namespace troupe
