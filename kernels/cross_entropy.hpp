// Softmax cross-entropy over a padded vocabulary, fused with its gradient.
//
// logits [N, Vp] hold Vp >= V columns; only the first V (the real vocabulary) take part,
// padded columns are ignored. A target of -1 marks an ignored row (loss 0, gradient 0).
//   loss[n] = logsumexp(logits[n, :V]) - logits[n, target[n]]
// The forward-backward variant overwrites logits with the gradient of
// sum_n(loss[n]) * grad_scale (e.g. grad_scale = loss_scale / num_tokens):
//   dlogits[n, j] = (softmax(logits[n, :V])[j] - [j == target[n]]) * grad_scale  (j < V), 0 (j >= V)
// so the logits' gradient never needs a second [N, Vp] buffer.
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// logits: [N, Vp]; targets: i32 [N]; losses: f32 [N]. logits are left untouched.
void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                           const Tensor& losses);
// As above, then logits <- dlogits (in place).
void cross_entropy_forward_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                                    float grad_scale, const Tensor& losses);

namespace cpu {
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_size, const Tensor& losses);
void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, int64_t vocab_size, float grad_scale,
                                    const Tensor& losses);
}  // namespace cpu
namespace cuda {
void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                           const Tensor& losses);
void cross_entropy_forward_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                                    float grad_scale, const Tensor& losses);
}  // namespace cuda

}  // namespace troupe
