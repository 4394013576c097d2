// The MoE router's auxiliary losses on f32 logits [N, E], with their gradients (Megatron-Core's
// moe_utils.py), each already multiplied by its coefficient:
//
//   balance (switch_load_balancing_loss_func, per group of rows; one group for aux_loss, one per
//   sequence for seq_aux_loss; G groups of S rows each):
//     s = softmax(l) over E, or sigmoid(l) / (sum sigmoid(l) + 1e-20)  (whatever the routing's
//         pre-softmax or expert bias: compute_routing_scores_for_aux_loss)
//     tokens[g, e] = rows of group g whose top-k of s holds e (ties to the lower expert)
//     loss = coeff * E / (K * S^2 * G) * sum_g sum_e (sum_{n in g} s[n, e]) tokens[g, e]
//   z-loss: loss = coeff / N * sum_n logsumexp(l_n)^2
//
// Both are sums over rows once the counts are known, so under context parallelism (each rank
// holding a part of every group's rows) a rank counts its rows, the counts are summed over the
// context group, and each rank computes its rows' part of the loss with the whole groups' sizes
// (S, N over every context rank): the parts add up to the loss, and each part's gradient is
// the loss's gradient on that rank's rows. Without context parallelism S and N are the rows here.
//
// Losses land in an f32 [1] slot (so a caller can gather every scalar it needs on the host in
// one copy); sums are in a fixed order on both backends (no float atomics).
//
//   moe_balance_counts(ctx, logits, fn, K, group_tokens, tokens);        // this rank's rows
//   ... sum tokens over the context group ...
//   moe_balance_loss_forward(ctx, logits, tokens, fn, K, S, coeff, loss);
//   moe_balance_loss_backward(ctx, logits, tokens, fn, K, S, coeff * grad_scale, dlogits);
#pragma once

#include <cstdint>

#include "kernels/moe_routing.hpp"

namespace troupe {

// tokens: f32 [G, E] (overwritten), G = N / group_tokens: the rows of each run of
// group_tokens rows whose top-k balance scores hold each expert.
void moe_balance_counts(const Context& ctx, const Tensor& logits, MoeScoreFunction fn, int topk, int64_t group_tokens,
                        const Tensor& tokens);
// loss: f32 [1] (overwritten), these rows' part of the balance loss. tokens: f32 [G, E], the
// counts of the whole groups (G dividing N: row n is in group n / (N / G)); group_size: S, the
// rows of a whole group (a multiple of N / G).
void moe_balance_loss_forward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                              int topk, int64_t group_size, float coeff, const Tensor& loss);
// dlogits: f32 [N, E], ACCUMULATES d(coeff-scaled loss)/d(logits); pass coeff * the loss's
// gradient scale.
void moe_balance_loss_backward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                               int topk, int64_t group_size, float coeff, const Tensor& dlogits);
// total_rows: N of the mean, the rows over every context rank (a multiple of logits' rows).
void moe_z_loss_forward(const Context& ctx, const Tensor& logits, float coeff, int64_t total_rows, const Tensor& loss);
void moe_z_loss_backward(const Context& ctx, const Tensor& logits, float coeff, int64_t total_rows,
                         const Tensor& dlogits);

namespace cpu {
void moe_balance_counts(const Tensor& logits, MoeScoreFunction fn, int topk, int64_t group_tokens,
                        const Tensor& tokens);
void moe_balance_loss_forward(const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn, int topk,
                              int64_t group_size, float coeff, const Tensor& loss);
void moe_balance_loss_backward(const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn, int topk,
                               int64_t group_size, float coeff, const Tensor& dlogits);
void moe_z_loss_forward(const Tensor& logits, float coeff, int64_t total_rows, const Tensor& loss);
void moe_z_loss_backward(const Tensor& logits, float coeff, int64_t total_rows, const Tensor& dlogits);
}  // namespace cpu
namespace cuda {
void moe_balance_counts(const Context& ctx, const Tensor& logits, MoeScoreFunction fn, int topk, int64_t group_tokens,
                        const Tensor& tokens);
void moe_balance_loss_forward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                              int topk, int64_t group_size, float coeff, const Tensor& loss);
void moe_balance_loss_backward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                               int topk, int64_t group_size, float coeff, const Tensor& dlogits);
void moe_z_loss_forward(const Context& ctx, const Tensor& logits, float coeff, int64_t total_rows, const Tensor& loss);
void moe_z_loss_backward(const Context& ctx, const Tensor& logits, float coeff, int64_t total_rows,
                         const Tensor& dlogits);
}  // namespace cuda

}  // namespace troupe
