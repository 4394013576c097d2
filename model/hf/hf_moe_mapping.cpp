#include "model/hf/hf_moe_mapping.hpp"

#include <nlohmann/json.hpp>

#include "base/check.hpp"

namespace troupe {

namespace {

// "experts.3.linear_fc1.weight" -> expert 3, linear "linear_fc1".
bool split_expert_name(const std::string& rest, int& expert, std::string& linear) {
  const std::string prefix = "mlp.experts.";
  if (rest.rfind(prefix, 0) != 0) return false;
  const size_t dot = rest.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  expert = std::stoi(rest.substr(prefix.size(), dot - prefix.size()));
  linear = rest.substr(dot + 1);
  return true;
}

// The layers without experts (Qwen-MoE's mlp_only_layers).
std::vector<int> dense_layers(const GptConfig& c) {
  std::vector<int> dense;
  for (int l = 0; l < c.num_layers; ++l)
    if (!c.is_moe_layer(l)) dense.push_back(l);
  return dense;
}

}  // namespace

std::vector<HfPiece> hf_moe_pieces(const GptConfig& c, HfArch arch, int layer, const std::string& rest,
                                   HfExpertLayout experts) {
  const MoeConfig& m = c.moe;
  const int64_t C = c.hidden_size, E = m.num_experts, F = m.expert_ffn(c.ffn());
  const int64_t S = m.moe_shared_expert_intermediate_size;
  const bool mixtral = arch == HfArch::mixtral;
  const std::string l = "model.layers." + std::to_string(layer) + ".";
  // Mixtral's per-expert files keep the module name of transformers 4 (block_sparse_moe).
  const std::string block = l + (mixtral && experts == HfExpertLayout::per_expert ? "block_sparse_moe." : "mlp.");
  TROUPE_CHECK(c.swiglu, "an MoE model without SwiGLU (--swiglu) has no Hugging Face family");
  if (rest == "mlp.router.weight") return {{block + "gate.weight", {E, C}}};
  if (rest == "mlp.shared_experts.linear_fc1.weight" && !mixtral)
    return {{block + "shared_expert.gate_proj.weight", {S, C}, false, 0},
            {block + "shared_expert.up_proj.weight", {S, C}, false, S}};
  if (rest == "mlp.shared_experts.linear_fc2.weight" && !mixtral)
    return {{block + "shared_expert.down_proj.weight", {C, S}}};
  if (rest == "mlp.shared_experts.gate_weight" && !mixtral) return {{block + "shared_expert_gate.weight", {1, C}}};
  int e = 0;
  std::string linear;
  TROUPE_CHECK(split_expert_name(rest, e, linear) && e >= 0 && e < E, "no ", mixtral ? "Mixtral" : "Qwen-MoE",
               " name for parameter 'decoder.layers.", layer, ".", rest, "'");
  if (experts == HfExpertLayout::fused) {
    if (linear == "linear_fc1.weight") return {{block + "experts.gate_up_proj", {E, 2 * F, C}, false, 0, e}};
    if (linear == "linear_fc2.weight") return {{block + "experts.down_proj", {E, C, F}, false, 0, e}};
  }
  const std::string x = block + "experts." + std::to_string(e) + ".";
  if (linear == "linear_fc1.weight") {
    if (mixtral) return {{x + "w1.weight", {F, C}, false, 0}, {x + "w3.weight", {F, C}, false, F}};
    return {{x + "gate_proj.weight", {F, C}, false, 0}, {x + "up_proj.weight", {F, C}, false, F}};
  }
  if (linear == "linear_fc2.weight") return {{x + (mixtral ? "w2.weight" : "down_proj.weight"), {C, F}}};
  TROUPE_FAIL("no ", mixtral ? "Mixtral" : "Qwen-MoE", " name for parameter 'decoder.layers.", layer, ".", rest, "'");
}

HfArch hf_moe_arch_for(const GptConfig& c) {
  return c.qk_layernorm || c.add_qkv_bias || c.moe.has_shared_expert() ? HfArch::qwen_moe : HfArch::mixtral;
}

void hf_moe_config_from_gpt(const GptConfig& c, HfArch arch, nlohmann::json& j) {
  const MoeConfig& m = c.moe;
  TROUPE_CHECK(m.enabled(), "hf_moe_config_from_gpt: the model has no experts (--num-experts)");
  // What every family's router computes: softmax over the logits, top k, no scaling.
  TROUPE_CHECK(m.moe_router_score_function == MoeScoreFunction::softmax,
               "--moe-router-score-function sigmoid has no Hugging Face family here (Mixtral and Qwen-MoE route "
               "with softmax): such a model cannot be exported");
  TROUPE_CHECK(m.moe_router_topk_scaling_factor == 0, "--moe-router-topk-scaling-factor ",
               m.moe_router_topk_scaling_factor,
               " has no Hugging Face family here (Mixtral and Qwen-MoE do not scale the routing weights): such a model "
               "cannot be exported");
  const std::string families =
      "an MoE model exports as MixtralForCausalLM (every layer MoE, no --moe-router-pre-softmax, no shared expert, "
      "no --qk-layernorm or --add-qkv-bias), Qwen2MoeForCausalLM (--add-qkv-bias and a shared expert with "
      "--moe-shared-expert-gate) or Qwen3MoeForCausalLM (--qk-layernorm, no shared expert)";
  j["output_router_logits"] = false;  // transformers' own load-balancing loss: off (a training setting)
  j["router_aux_loss_coef"] = m.load_balancing_coeff();
  j["num_experts_per_tok"] = m.moe_router_topk;
  if (arch == HfArch::mixtral) {
    TROUPE_CHECK(!c.qk_layernorm && !c.add_qkv_bias && !m.has_shared_expert(), families);
    TROUPE_CHECK(dense_layers(c).empty(), "--moe-layer-freq ", moe_layer_freq_str(m.moe_layer_freq),
                 " leaves layers without experts, which Mixtral has not: ", families);
    TROUPE_CHECK(!m.moe_router_pre_softmax,
                 "--moe-router-pre-softmax (the top k keep their softmax over all experts) is not Mixtral's router, "
                 "which renormalizes them: ",
                 families);
    j["model_type"] = "mixtral";
    j["architectures"] = {"MixtralForCausalLM"};
    j["intermediate_size"] = m.expert_ffn(c.ffn());
    j["num_local_experts"] = m.num_experts;
    j["router_jitter_noise"] = 0.0;
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
    return;
  }
  TROUPE_CHECK(arch == HfArch::qwen_moe, "hf_moe_config_from_gpt: not an MoE family");
  TROUPE_CHECK(c.sliding_window == 0, "--sliding-window ", c.sliding_window,
               " with experts exports as Mixtral only (Qwen-MoE windows some layers): ", families);
  if (c.qk_layernorm) {
    TROUPE_CHECK(!c.add_qkv_bias && !m.has_shared_expert(), families);
    j["model_type"] = "qwen3_moe";
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["attention_bias"] = false;
  } else {
    TROUPE_CHECK(c.add_qkv_bias && m.has_shared_expert() && m.moe_shared_expert_gate, families);
    j["model_type"] = "qwen2_moe";
    j["architectures"] = {"Qwen2MoeForCausalLM"};
    j["shared_expert_intermediate_size"] = m.moe_shared_expert_intermediate_size;
  }
  // transformers 4's key (5 reads it too); Qwen3-MoE configs of transformers 5 say num_local_experts.
  j["num_experts"] = m.num_experts;
  j["moe_intermediate_size"] = m.expert_ffn(c.ffn());
  j["norm_topk_prob"] = !m.moe_router_pre_softmax;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = dense_layers(c);
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = c.num_layers;
}

}  // namespace troupe
