#include "apps/train/moe_flags.hpp"

#include "apps/common/count_flags.hpp"
#include "apps/common/float_flags.hpp"
#include "base/check.hpp"

namespace troupe::apps {

void add_moe_flags(CLI::App* cmd, MoeFlags& f) {
  cmd->option_defaults()->group("Mixture of experts (docs/train.md#mixture-of-experts)");
  auto keep = [&](CLI::Option* o) {
    f.options.push_back(o);
    return o;
  };
  cmd->add_option("--num-experts", f.num_experts, "routed experts of each MoE layer (0: a dense model)")
      ->check(non_negative_count());
  // Not a --moe-* flag: Megatron scripts of dense models pass it as 1.
  cmd->add_option("--expert-model-parallel-size", f.expert_model_parallel_size,
                  "split each MoE layer's experts over this many data-parallel ranks (CPU devices)")
      ->check(positive_count());
  cmd->add_option("--expert-tensor-parallel-size", f.expert_tensor_parallel_size,
                  "split each expert over this many tensor-parallel ranks: only --tensor-model-parallel-size "
                  "(the default)")
      ->check(positive_count());
  keep(cmd->add_option("--moe-router-topk", f.topk, "experts each token goes to")->check(positive_count()));
  keep(cmd->add_option("--moe-router-load-balancing-type", f.load_balancing, "aux_loss, seq_aux_loss or none")
           ->check(CLI::IsMember({"aux_loss", "seq_aux_loss", "none"})));
  keep(cmd->add_option("--moe-aux-loss-coeff", f.aux_loss_coeff, "weight of the load-balancing loss (0: none)")
           ->check(finite_float()));
  keep(cmd->add_option("--moe-z-loss-coeff", f.z_loss_coeff, "weight of the router z-loss (0: none)")
           ->check(finite_float()));
  keep(cmd->add_option("--moe-ffn-hidden-size", f.ffn_hidden_size, "FFN size of each expert (0: --ffn-hidden-size)")
           ->check(non_negative_count()));
  keep(cmd->add_option("--moe-shared-expert-intermediate-size", f.shared_expert_intermediate_size,
                       "FFN size of the shared expert every token also goes through (0: none)")
           ->check(non_negative_count()));
  keep(cmd->add_flag("--moe-shared-expert-gate", f.shared_expert_gate,
                     "scale the shared expert's output by sigmoid(x . g), a learned gate (Qwen2-MoE)"));
  keep(cmd->add_flag("--moe-shared-expert-overlap", f.shared_expert_overlap,
                     "on GPUs with --expert-model-parallel-size > 1: run the token all-to-alls on a stream of their "
                     "own beside the shared expert"));
  keep(cmd->add_flag("--moe-all-to-all-on-compute-stream", f.all_to_all_on_compute_stream,
                     "on GPUs with --expert-model-parallel-size > 1: run the token all-to-alls on the stage's compute "
                     "stream, not on one of their own (as before; for comparison, the same math)"));
  keep(cmd->add_flag("--overlap-moe-expert-parallel-comm", f.overlap_expert_parallel_comm,
                     "with --expert-model-parallel-size > 1: run each forward beside the backward before it (a "
                     "second stream), so its all-to-alls overlap the other microbatch's work (the same math; on CPU "
                     "devices ops run one at a time anyway)"));
  keep(cmd->add_option("--moe-layer-freq", f.layer_freq,
                       "which layers are MoE: N (every N-th from layer 0) or a pattern such as \"([1]*3+[0])*2\""));
  keep(cmd->add_option("--moe-router-score-function", f.score_function, "softmax or sigmoid")
           ->check(CLI::IsMember({"softmax", "sigmoid"})));
  keep(cmd->add_flag("--moe-router-pre-softmax", f.pre_softmax, "softmax over all experts before the top-k"));
  keep(cmd->add_flag("--moe-router-enable-expert-bias", f.enable_expert_bias,
                     "aux-loss-free load balancing: a per-expert bias on the top-k choice (sigmoid scores)"));
  keep(cmd->add_option("--moe-router-bias-update-rate", f.bias_update_rate, "step of the expert bias update")
           ->check(finite_float()));
  keep(cmd->add_option("--moe-router-topk-scaling-factor", f.topk_scaling_factor,
                       "factor on the top-k weights (0: none)")
           ->check(finite_float()));
  keep(cmd->add_option("--moe-expert-capacity-factor", f.capacity_factor,
                       "drop tokens beyond capacity = factor x tokens x topk / experts (default: dropless)")
           ->check(finite_float()));
  keep(cmd->add_flag("--moe-pad-expert-input-to-capacity", f.pad_to_capacity,
                     "pad every expert's tokens to its capacity (needs --moe-expert-capacity-factor)"));
  keep(cmd->add_option("--moe-token-drop-policy", f.token_drop_policy,
                       "which tokens the capacity drops: probs (lowest weights) or position (latest)")
           ->check(CLI::IsMember({"probs", "position"})));
}

MoeConfig moe_config_from_flags(const MoeFlags& f) {
  MoeConfig m;
  if (f.num_experts == 0) {
    for (const CLI::Option* o : f.options)
      TROUPE_CHECK(o->count() == 0, o->get_name(), " is a mixture-of-experts flag: give --num-experts too");
    return m;
  }
  m.num_experts = f.num_experts;
  TROUPE_CHECK(!f.shared_expert_overlap || f.shared_expert_intermediate_size > 0,
               "--moe-shared-expert-overlap overlaps the all-to-alls with the shared expert: give "
               "--moe-shared-expert-intermediate-size too");
  TROUPE_CHECK(!f.shared_expert_overlap || !f.all_to_all_on_compute_stream,
               "--moe-shared-expert-overlap runs the all-to-alls on a stream of their own beside the shared expert: "
               "drop --moe-all-to-all-on-compute-stream");
  m.moe_router_topk = f.topk;
  m.moe_router_load_balancing_type = moe_load_balancing_from_name(f.load_balancing);
  m.moe_aux_loss_coeff = f.aux_loss_coeff;
  m.moe_z_loss_coeff = f.z_loss_coeff;
  m.moe_ffn_hidden_size = f.ffn_hidden_size;
  m.moe_shared_expert_intermediate_size = f.shared_expert_intermediate_size;
  m.moe_shared_expert_gate = f.shared_expert_gate;
  m.moe_layer_freq = parse_moe_layer_freq(f.layer_freq);
  m.moe_router_score_function = moe_score_function_from_name(f.score_function);
  m.moe_router_pre_softmax = f.pre_softmax;
  m.moe_router_enable_expert_bias = f.enable_expert_bias;
  m.moe_router_bias_update_rate = f.bias_update_rate;
  m.moe_router_topk_scaling_factor = f.topk_scaling_factor;
  // Megatron: absent or negative is dropless.
  m.moe_expert_capacity_factor = f.capacity_factor.value_or(0.0);
  m.moe_pad_expert_input_to_capacity = f.pad_to_capacity;
  m.moe_token_drop_policy = moe_token_drop_policy_from_name(f.token_drop_policy);
  return m;
}

}  // namespace troupe::apps
