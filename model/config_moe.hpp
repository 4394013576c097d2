// The mixture-of-experts part of GptConfig: the checks that tie the MoE flags to the rest of the
// model, the MoE MLP's size, the spec model/moe/moe_mlp.hpp runs with, and the "moe" object of a
// checkpoint's model config.
//
//   GptConfig c = ...;  c.moe.num_experts = 4;  c.disable_bias_linear = true;
//   validate_moe(c);                      // throws naming the flag
//   MoeMlpSpec spec = moe_mlp_spec(c);    // what every MoE layer of c runs
#pragma once

#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "model/config.hpp"
#include "model/moe/moe_mlp.hpp"

namespace troupe {

// MoeConfig::validate plus what the dense model's flags must be for it; nothing for a dense model.
void validate_moe(const GptConfig& c);
MoeMlpSpec moe_mlp_spec(const GptConfig& c);
// Parameters of one MoE MLP (router, routed experts, shared expert and its gate).
int64_t moe_mlp_parameters(const GptConfig& c);
// Of those, the ones a token runs through: the router, its top-k routed experts, the shared expert
// (and gate). What FLOPs per token count (Megatron's num_floating_point_operations does the same).
int64_t moe_mlp_active_parameters(const GptConfig& c);

// Keys are Megatron's flag names without the dashes (num_experts, moe_router_topk, ...).
nlohmann::json moe_config_to_json(const MoeConfig& m);
MoeConfig moe_config_from_json(const nlohmann::json& j);  // throws naming an unknown key

}  // namespace troupe
