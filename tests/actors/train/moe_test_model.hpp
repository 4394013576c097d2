// The small MoE model the training-runtime MoE tests share (moe_parity_test,
// moe_expert_parallel_run_test): 4 experts top-2 of width 32 on layers ([1]*3+[0])*2 (dense
// layers in between), aux and z losses on, optionally capacity dropping and a shared expert.
#pragma once

#include "model/moe/moe_config.hpp"

namespace troupe::test {

inline void set_test_moe(MoeConfig& m, double capacity, bool shared_expert) {
  m.num_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 32;
  m.moe_aux_loss_coeff = 1e-2f;
  m.moe_z_loss_coeff = 1e-3f;
  m.moe_layer_freq = parse_moe_layer_freq("([1]*3+[0])*2");
  m.moe_expert_capacity_factor = capacity;  // 0: dropless
  if (shared_expert) m.moe_shared_expert_intermediate_size = 16;
}

}  // namespace troupe::test
