// Mixture-of-experts top-k routing (Megatron-Core's topk_routing_with_score_function), in f32:
// from router logits [N, E] to the k experts each token goes to and the weights its outputs get.
//
//   softmax, pre_softmax:   s = softmax(l) over E;  pick the k largest s;  p = s[picked]
//   softmax (default):      pick the k largest l;   p = softmax(l[picked]) over the k
//   sigmoid:                s = sigmoid(l);  pick the k largest s + expert_bias (the bias only
//                           chooses, DeepSeek-V3);  p = s[picked] / (sum of s[picked] + 1e-20)
//                           (k > 1; p = s for k = 1)
//   then p *= scaling_factor (when > 0; Megatron's --moe-router-topk-scaling-factor).
// The k picks of a row are in descending order of their selection score, ties to the lower
// expert index.
//
//   MoeTopk t{.topk = 2};
//   moe_topk_forward(ctx, logits, Tensor(), t, probs, experts);
//   moe_topk_backward(ctx, logits, experts, dprobs, t, dlogits);   // dlogits += d(probs)/d(logits)^T dprobs
#pragma once

#include <cstdint>

#include "kernels/tensor.hpp"

namespace troupe {

enum class MoeScoreFunction : uint8_t { softmax, sigmoid };

struct MoeTopk {
  int topk = 2;
  MoeScoreFunction score_function = MoeScoreFunction::softmax;
  bool pre_softmax = false;     // softmax over all experts before the pick (sigmoid is always "pre")
  float scaling_factor = 0.0f;  // <= 0: none
};

// logits: f32 [N, E]; expert_bias: f32 [E] or undefined (sigmoid only); probs: f32 [N, K];
// experts: i32 [N, K] (overwritten).
void moe_topk_forward(const Context& ctx, const Tensor& logits, const Tensor& expert_bias, const MoeTopk& t,
                      const Tensor& probs, const Tensor& experts);
// dlogits: f32 [N, E], ACCUMULATES (the router's other losses add into the same buffer).
// dprobs: f32 [N, K], the gradient of the (scaled) probs.
void moe_topk_backward(const Context& ctx, const Tensor& logits, const Tensor& experts, const Tensor& dprobs,
                       const MoeTopk& t, const Tensor& dlogits);

namespace cpu {
void moe_topk_forward(const Tensor& logits, const Tensor& expert_bias, const MoeTopk& t, const Tensor& probs,
                      const Tensor& experts);
void moe_topk_backward(const Tensor& logits, const Tensor& experts, const Tensor& dprobs, const MoeTopk& t,
                       const Tensor& dlogits);
}  // namespace cpu
namespace cuda {
void moe_topk_forward(const Context& ctx, const Tensor& logits, const Tensor& expert_bias, const MoeTopk& t,
                      const Tensor& probs, const Tensor& experts);
void moe_topk_backward(const Context& ctx, const Tensor& logits, const Tensor& experts, const Tensor& dprobs,
                       const MoeTopk& t, const Tensor& dlogits);
}  // namespace cuda

}  // namespace troupe
