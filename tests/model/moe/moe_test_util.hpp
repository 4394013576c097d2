// Helpers of the MoE model tests: a small block with random weights, and the routing it made.
#pragma once

#include "model/moe/moe_mlp.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {

// Random N(0, std^2) weights for every parameter of the spec (the router a little larger, so
// that routing gaps are wide compared with finite-difference probes).
inline MoeMlpParams random_moe_params(const MoeMlpSpec& spec, uint64_t seed, float std = 0.4f) {
  MoeMlpParams p = moe_mlp_params(spec);
  auto fill = [&](const Tensor& t, float s) {
    if (!t.defined()) return;
    Tensor r = random_normal(t.shape(), seed++, s);
    std::copy(r.data_as<float>(), r.data_as<float>() + r.numel(), t.data_as<float>());
  };
  fill(p.router, 3 * std);
  fill(p.fc1, std);
  fill(p.fc2, std);
  fill(p.shared_fc1, std);
  fill(p.shared_fc2, std);
  fill(p.shared_gate, std);
  return p;
}

// The inference tests' blocks: Mixtral-like (softmax top-2 of 8, SwiGLU) or DeepSeek-like
// (sigmoid top-6 of 32 with an expert bias and scaling, a gated shared expert, GELU).
inline MoeMlpSpec inference_test_spec(bool deepseek) {
  MoeConfig c;
  if (!deepseek) {
    c.num_experts = 8;
    c.moe_router_topk = 2;
    return {c, /*hidden=*/64, /*expert_ffn=*/96, /*swiglu=*/true};
  }
  c.num_experts = 32;
  c.moe_router_topk = 6;
  c.moe_router_score_function = MoeScoreFunction::sigmoid;
  c.moe_router_enable_expert_bias = true;
  c.moe_router_topk_scaling_factor = 2.5f;
  c.moe_shared_expert_intermediate_size = 40;
  c.moe_shared_expert_gate = true;
  return {c, /*hidden=*/72, /*expert_ffn=*/40, /*swiglu=*/false};
}

}  // namespace troupe::test
