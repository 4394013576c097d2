// Mixture-of-experts settings with Megatron-LM's flag names (each field's flag in its comment)
// and defaults, the checks Megatron-Core makes on them, and which layers are MoE layers.
//
//   MoeConfig m;
//   m.num_experts = 8;                         // --num-experts 8
//   m.moe_router_topk = 2;                     // --moe-router-topk 2
//   m.moe_layer_freq = parse_moe_layer_freq("([1]*3+[0])*2");
//   m.validate(/*num_layers=*/8);              // throws naming the flag that is wrong
//   bool moe = m.is_moe_layer(3, 8);           // false: the fourth layer stays dense
#pragma once

#include <string>
#include <vector>

#include "kernels/moe_routing.hpp"

namespace troupe {

enum class MoeLoadBalancing { aux_loss, seq_aux_loss, none };
enum class MoeTokenDropPolicy { probs, position };

// --moe-layer-freq: an integer N (layer l is MoE when l % N == 0) or Megatron's list pattern,
// one 0/1 per layer.
struct MoeLayerFreq {
  int every = 1;
  std::vector<int> pattern;  // non-empty: the list form
};
// "4", or a Python list expression of 0/1 lists, `+`, `*` by an integer and parentheses as
// Megatron's --moe-layer-freq takes: "([1]*3+[0]*1)*3", "[0]+[1]*23". Throws naming the flag.
MoeLayerFreq parse_moe_layer_freq(const std::string& text);
std::string moe_layer_freq_str(const MoeLayerFreq& f);

struct MoeConfig {
  int num_experts = 0;          // --num-experts; 0: a dense model (no MoE layer)
  MoeLayerFreq moe_layer_freq;  // --moe-layer-freq
  int moe_ffn_hidden_size = 0;  // --moe-ffn-hidden-size; 0: --ffn-hidden-size
  // --moe-shared-expert-intermediate-size: the shared experts' total FFN size (all shared
  // experts as one MLP, as Megatron runs them); 0: none.
  int moe_shared_expert_intermediate_size = 0;
  // --moe-shared-expert-gate: the shared expert's output times sigmoid(x . g), g [1, C]
  // (Qwen2-MoE's shared_expert_gate).
  bool moe_shared_expert_gate = false;
  int moe_router_topk = 2;                                                 // --moe-router-topk
  MoeScoreFunction moe_router_score_function = MoeScoreFunction::softmax;  // --moe-router-score-function
  bool moe_router_pre_softmax = false;                                     // --moe-router-pre-softmax
  float moe_router_topk_scaling_factor = 0.0f;                             // --moe-router-topk-scaling-factor; 0: none
  MoeLoadBalancing moe_router_load_balancing_type = MoeLoadBalancing::aux_loss;  // --moe-router-load-balancing-type
  float moe_aux_loss_coeff = 0.0f;             // --moe-aux-loss-coeff (0: no load-balancing loss)
  float moe_z_loss_coeff = 0.0f;               // --moe-z-loss-coeff (0: no z-loss)
  bool moe_router_enable_expert_bias = false;  // --moe-router-enable-expert-bias
  float moe_router_bias_update_rate = 1e-3f;   // --moe-router-bias-update-rate
  // --moe-expert-capacity-factor; <= 0 (Megatron: absent or negative): dropless. A double, as
  // Python's float, so that the capacity's ceil matches Megatron's (50 * 1.1 -> 56).
  double moe_expert_capacity_factor = 0.0;
  bool moe_pad_expert_input_to_capacity = false;                         // --moe-pad-expert-input-to-capacity
  MoeTokenDropPolicy moe_token_drop_policy = MoeTokenDropPolicy::probs;  // --moe-token-drop-policy

  bool enabled() const { return num_experts > 0; }
  bool drops_tokens() const { return moe_expert_capacity_factor > 0; }
  bool has_shared_expert() const { return moe_shared_expert_intermediate_size > 0; }
  // The routed experts' FFN size given the dense --ffn-hidden-size.
  int expert_ffn(int dense_ffn) const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : dense_ffn; }
  // The coefficient of the load-balancing loss in use (0 when the type is none).
  float load_balancing_coeff() const {
    return moe_router_load_balancing_type == MoeLoadBalancing::none ? 0.0f : moe_aux_loss_coeff;
  }
  MoeTopk topk() const {
    return {moe_router_topk, moe_router_score_function, moe_router_pre_softmax, moe_router_topk_scaling_factor};
  }

  // Throws troupe::Error naming the Megatron flag that is wrong (Megatron-Core's
  // TransformerConfig checks plus ours: a flag that would do nothing is refused).
  void validate(int num_layers) const;
  // Throws naming the flags when --context-parallel-size `context_size` (> 1) meets what it does
  // not implement: capacity dropping, which ranks a microbatch's tokens across the context ranks.
  void validate_context_parallel(int context_size) const;
  // Whether layer `layer` (0-based, of num_layers) has an MoE MLP.
  bool is_moe_layer(int layer, int num_layers) const;
};

const char* moe_score_function_name(MoeScoreFunction f);
MoeScoreFunction moe_score_function_from_name(const std::string& name);  // throws naming the flag
const char* moe_load_balancing_name(MoeLoadBalancing t);
MoeLoadBalancing moe_load_balancing_from_name(const std::string& name);
const char* moe_token_drop_policy_name(MoeTokenDropPolicy p);
MoeTokenDropPolicy moe_token_drop_policy_from_name(const std::string& name);

// Megatron's get_capacity: ceil(num_tokens / num_experts * capacity_factor), where num_tokens
// counts every (token, choice): N * topk.
int64_t moe_expert_capacity(int64_t num_tokens, int num_experts, double capacity_factor);

}  // namespace troupe
