#include "model/config_moe.hpp"

#include <nlohmann/json.hpp>

#include "base/check.hpp"

namespace troupe {

void validate_moe(const GptConfig& c) {
  const MoeConfig& m = c.moe;
  m.validate(c.num_layers);
  if (!m.enabled()) return;
  // The experts (model/moe/experts.hpp) have no biases, as the MoE models Megatron trains.
  TROUPE_CHECK(c.disable_bias_linear,
               "--num-experts needs --disable-bias-linear: the experts have no biases (as in Mixtral, Qwen-MoE and "
               "DeepSeek)");
  TROUPE_CHECK(m.expert_ffn(c.ffn()) % 8 == 0, "--moe-ffn-hidden-size must be a multiple of 8, got ",
               m.expert_ffn(c.ffn()));
  TROUPE_CHECK(m.moe_shared_expert_intermediate_size % 8 == 0,
               "--moe-shared-expert-intermediate-size must be a multiple of 8, got ",
               m.moe_shared_expert_intermediate_size);
}

MoeMlpSpec moe_mlp_spec(const GptConfig& c) {
  return MoeMlpSpec{c.moe, c.hidden_size, c.moe.expert_ffn(c.ffn()), c.swiglu};
}

int64_t moe_mlp_parameters(const GptConfig& c) {
  const MoeConfig& m = c.moe;
  const int64_t C = c.hidden_size, F = m.expert_ffn(c.ffn()), S = m.moe_shared_expert_intermediate_size;
  const int64_t glu = c.swiglu ? 2 : 1;
  int64_t n = int64_t(m.num_experts) * C + int64_t(m.num_experts) * (glu + 1) * F * C;
  if (m.has_shared_expert()) n += (glu + 1) * S * C + (m.moe_shared_expert_gate ? C : 0);
  return n;
}

int64_t moe_mlp_active_parameters(const GptConfig& c) {
  const MoeConfig& m = c.moe;
  const int64_t C = c.hidden_size, F = m.expert_ffn(c.ffn()), glu = c.swiglu ? 2 : 1;
  return moe_mlp_parameters(c) - int64_t(m.num_experts - m.moe_router_topk) * (glu + 1) * F * C;
}

nlohmann::json moe_config_to_json(const MoeConfig& m) {
  nlohmann::json freq = m.moe_layer_freq.every;
  if (!m.moe_layer_freq.pattern.empty()) freq = m.moe_layer_freq.pattern;
  return {{"num_experts", m.num_experts},
          {"moe_layer_freq", freq},
          {"moe_ffn_hidden_size", m.moe_ffn_hidden_size},
          {"moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size},
          {"moe_shared_expert_gate", m.moe_shared_expert_gate},
          {"moe_router_topk", m.moe_router_topk},
          {"moe_router_score_function", moe_score_function_name(m.moe_router_score_function)},
          {"moe_router_pre_softmax", m.moe_router_pre_softmax},
          {"moe_router_topk_scaling_factor", m.moe_router_topk_scaling_factor},
          {"moe_router_load_balancing_type", moe_load_balancing_name(m.moe_router_load_balancing_type)},
          {"moe_aux_loss_coeff", m.moe_aux_loss_coeff},
          {"moe_z_loss_coeff", m.moe_z_loss_coeff},
          {"moe_router_enable_expert_bias", m.moe_router_enable_expert_bias},
          {"moe_router_bias_update_rate", m.moe_router_bias_update_rate},
          {"moe_expert_capacity_factor", m.moe_expert_capacity_factor},
          {"moe_pad_expert_input_to_capacity", m.moe_pad_expert_input_to_capacity},
          {"moe_token_drop_policy", moe_token_drop_policy_name(m.moe_token_drop_policy)}};
}

MoeConfig moe_config_from_json(const nlohmann::json& j) {
  MoeConfig m;
  TROUPE_CHECK(j.is_object(), "model config: moe must be an object, got ", j.dump());
  const nlohmann::json known = moe_config_to_json(m);
  for (const auto& [key, value] : j.items())
    TROUPE_CHECK(known.contains(key), "model config: moe has an unknown key '", key, "' (", value.dump(),
                 "): written by a newer Troupe? This version cannot build that model");
  auto get = [&](const char* key, auto& field) {
    if (j.contains(key)) j.at(key).get_to(field);
  };
  try {
    get("num_experts", m.num_experts);
    if (j.contains("moe_layer_freq")) {
      const nlohmann::json& f = j.at("moe_layer_freq");
      if (f.is_array())
        f.get_to(m.moe_layer_freq.pattern);
      else
        f.get_to(m.moe_layer_freq.every);
    }
    get("moe_ffn_hidden_size", m.moe_ffn_hidden_size);
    get("moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size);
    get("moe_shared_expert_gate", m.moe_shared_expert_gate);
    get("moe_router_topk", m.moe_router_topk);
    if (j.contains("moe_router_score_function"))
      m.moe_router_score_function = moe_score_function_from_name(j.at("moe_router_score_function"));
    get("moe_router_pre_softmax", m.moe_router_pre_softmax);
    get("moe_router_topk_scaling_factor", m.moe_router_topk_scaling_factor);
    if (j.contains("moe_router_load_balancing_type"))
      m.moe_router_load_balancing_type = moe_load_balancing_from_name(j.at("moe_router_load_balancing_type"));
    get("moe_aux_loss_coeff", m.moe_aux_loss_coeff);
    get("moe_z_loss_coeff", m.moe_z_loss_coeff);
    get("moe_router_enable_expert_bias", m.moe_router_enable_expert_bias);
    get("moe_router_bias_update_rate", m.moe_router_bias_update_rate);
    get("moe_expert_capacity_factor", m.moe_expert_capacity_factor);
    get("moe_pad_expert_input_to_capacity", m.moe_pad_expert_input_to_capacity);
    if (j.contains("moe_token_drop_policy"))
      m.moe_token_drop_policy = moe_token_drop_policy_from_name(j.at("moe_token_drop_policy"));
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL("bad model config JSON (moe): ", e.what());
  }
  return m;
}

}  // namespace troupe
