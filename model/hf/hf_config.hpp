// Reading a Hugging Face config.json exactly, as transformers 4.x and 5.x write it: every key
// that changes the model's math is either implemented or refused with an error naming the key
// and its value; keys known to change nothing are accepted quietly; any other key is refused
// too, naming it and the file (a key we do not know may change the math: a silently wrong
// model is worse than none). Keys of features Troupe does not implement (soft-capping, experts,
// quantization, ...) are accepted when null ("not set"). Both layouts of the RoPE settings are
// read: 4.x's top-level `rope_theta` and `rope_scaling`, 5.x's `rope_parameters` {rope_theta, rope_type, ...}.
//
//   HfConfig hf = read_hf_config(json, "ckpt/config.json");   // throws naming key, value and file
//   GptConfig model = hf.model;
//
// Families: GPT2LMHeadModel; LlamaForCausalLM (Llama 2, Llama 3/3.1/3.2 with rope_type llama3);
// MistralForCausalLM without a sliding window that takes effect (the same math as Llama).
// Qwen2ForCausalLM (Qwen2, Qwen2.5: Llama's math with a bias on q, k and v) and Qwen3ForCausalLM
// (Llama's math with an RMSNorm on each query and key head before RoPE, qk_layernorm, and a
// head_dim of its own) without their sliding window. Mixtures of experts (GptConfig::moe):
// MixtralForCausalLM (every layer MoE, Megatron's top-k then softmax), Qwen2MoeForCausalLM
// (Qwen2 with a gated shared expert) and Qwen3MoeForCausalLM (Qwen3 with experts); see
// read_hf_moe in hf_config.cpp for how their router and layer keys map to Megatron's flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/config.hpp"

namespace troupe {

// How the weights are named and laid out: GPT-2, the Llama family (Llama, Mistral, Qwen2, Qwen3),
// and the Llama family's mixtures of experts, whose expert tensors are named per family.
enum class HfArch { gpt2, llama, mixtral, qwen_moe };

struct HfConfig {
  HfArch arch = HfArch::gpt2;  // how the weights are named and laid out
  std::string model_type;      // as written: "gpt2", "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", ...
  GptConfig model;             // seq_length = max_position_embeddings, dropout 0
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // an int or a list in the file
  std::string dtype;                   // torch_dtype (4.x) or dtype (5.x): how the weights were saved; "" if absent
};

// `where` names the file in errors. Throws troupe::Error, also for a key it does not know.
HfConfig read_hf_config(const nlohmann::json& config, const std::string& where);

}  // namespace troupe
