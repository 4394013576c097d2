// The mixture-of-experts part of the HF mapping (hf_mapping.hpp): which HF tensors hold an MoE
// layer's router, routed experts and shared expert, and the config.json keys of an MoE model.
//
// Per-expert layout (what save_pretrained writes and every transformers version loads):
//   Mixtral:      block_sparse_moe.gate.weight [E, C] -> mlp.router.weight;
//                 block_sparse_moe.experts.{e}.w1 [F, C] (gate) ; w3 [F, C] (up) -> mlp.experts.{e}.linear_fc1 rows;
//                 block_sparse_moe.experts.{e}.w2 [C, F] -> mlp.experts.{e}.linear_fc2
//   Qwen2/3-MoE:  mlp.gate.weight [E, C] -> mlp.router.weight;
//                 mlp.experts.{e}.gate_proj [F, C] ; up_proj [F, C] -> linear_fc1 rows; down_proj [C, F] -> linear_fc2;
//                 (Qwen2-MoE) mlp.shared_expert.gate_proj [S, C] ; up_proj -> mlp.shared_experts.linear_fc1 rows,
//                 shared_expert.down_proj [C, S] -> shared_experts.linear_fc2,
//                 mlp.shared_expert_gate.weight [1, C] -> shared_experts.gate_weight
// Fused layout (transformers 5's in-memory experts, in files saved from its state_dict; read only):
//   mlp.gate.weight (Mixtral too); mlp.experts.gate_up_proj [E, 2F, C]: slice e is expert e's
//   linear_fc1 (rows [gate | up], as ours); mlp.experts.down_proj [E, C, F]: slice e its linear_fc2.
//
//   std::vector<HfPiece> p = hf_moe_pieces(config, HfArch::mixtral, 3, "mlp.router.weight",
//   HfExpertLayout::per_expert);
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/hf/hf_mapping.hpp"

namespace troupe {

// The HF pieces of parameter `rest` ("mlp.router.weight", "mlp.experts.3.linear_fc1.weight", ...)
// of MoE layer `layer`. Throws naming the parameter if it is none of an MoE MLP's.
std::vector<HfPiece> hf_moe_pieces(const GptConfig& c, HfArch arch, int layer, const std::string& rest,
                                   HfExpertLayout experts);

// The family an MoE model of `c` exports as: Mixtral when it has neither q/k norms, a q/k/v bias nor
// a shared expert; else Qwen-MoE (hf_moe_config_from_gpt says why, if it is no Qwen-MoE either).
HfArch hf_moe_arch_for(const GptConfig& c);

// Turns `j`, the Llama config.json of c's attention (hf_config_from_gpt), into the MoE family's:
// Mixtral, Qwen2-MoE (with a q/k/v bias and a gated shared expert) or Qwen3-MoE (with q/k norms).
// Throws naming the flag for a model no family holds.
void hf_moe_config_from_gpt(const GptConfig& c, HfArch arch, nlohmann::json& j);

}  // namespace troupe
