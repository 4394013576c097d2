// The MoE router's auxiliary losses on f32 logits [N, E], with their gradients (Megatron-Core's
// moe_utils.py), each already multiplied by its coefficient:
//
//   balance (switch_load_balancing_loss_func, per group of G = N / group_tokens rows; one group
//   for aux_loss, one per sequence for seq_aux_loss):
//     s = softmax(l) over E, or sigmoid(l) / (sum sigmoid(l) + 1e-20)  (whatever the routing's
//         pre-softmax or expert bias: compute_routing_scores_for_aux_loss)
//     tokens[g, e] = rows of group g whose top-k of s holds e (ties to the lower expert)
//     loss = coeff * E / (K * group_tokens^2 * G) * sum_g sum_e (sum_{n in g} s[n, e]) tokens[g, e]
//   z-loss: loss = coeff / N * sum_n logsumexp(l_n)^2
//
// Losses land in an f32 [1] slot (so a caller can gather every scalar it needs on the host in
// one copy); sums are in a fixed order on both backends (no float atomics).
//
//   moe_balance_loss_forward(ctx, logits, fn, K, group_tokens, coeff, tokens, loss);
//   moe_balance_loss_backward(ctx, logits, tokens, fn, K, coeff * grad_scale, dlogits);
#pragma once

#include <cstdint>

#include "kernels/moe_routing.hpp"

namespace troupe {

// tokens: f32 [G, E] (overwritten); loss: f32 [1] (overwritten).
void moe_balance_loss_forward(const Context& ctx, const Tensor& logits, MoeScoreFunction fn, int topk,
                              int64_t group_tokens, float coeff, const Tensor& tokens, const Tensor& loss);
// dlogits: f32 [N, E], ACCUMULATES d(coeff-scaled loss)/d(logits); pass coeff * the loss's
// gradient scale.
void moe_balance_loss_backward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                               int topk, float coeff, const Tensor& dlogits);
void moe_z_loss_forward(const Context& ctx, const Tensor& logits, float coeff, const Tensor& loss);
void moe_z_loss_backward(const Context& ctx, const Tensor& logits, float coeff, const Tensor& dlogits);

namespace cpu {
void moe_balance_loss_forward(const Tensor& logits, MoeScoreFunction fn, int topk, int64_t group_tokens, float coeff,
                              const Tensor& tokens, const Tensor& loss);
void moe_balance_loss_backward(const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn, int topk, float coeff,
                               const Tensor& dlogits);
void moe_z_loss_forward(const Tensor& logits, float coeff, const Tensor& loss);
void moe_z_loss_backward(const Tensor& logits, float coeff, const Tensor& dlogits);
}  // namespace cpu
namespace cuda {
void moe_balance_loss_forward(const Context& ctx, const Tensor& logits, MoeScoreFunction fn, int topk,
                              int64_t group_tokens, float coeff, const Tensor& tokens, const Tensor& loss);
void moe_balance_loss_backward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                               int topk, float coeff, const Tensor& dlogits);
void moe_z_loss_forward(const Context& ctx, const Tensor& logits, float coeff, const Tensor& loss);
void moe_z_loss_backward(const Context& ctx, const Tensor& logits, float coeff, const Tensor& dlogits);
}  // namespace cuda

}  // namespace troupe
