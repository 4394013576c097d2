// The small MoE model the training-runtime MoE tests share (moe_parity_test,
// moe_expert_parallel_run_test, moe_context_parallel_run_test): 4 experts top-2 of width 32 on
// layers ([1]*3+[0])*2 (dense layers in between), aux and z losses on, optionally capacity
// dropping and a shared expert; and the check of a run's router statistics.
#pragma once

#include "model/moe/moe_config.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

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

// The router statistics the log line shows (load-balancing loss, z-loss, expert load of the 6
// MoE layers), for 3 iterations of `config`: the same as one device's.
inline void expect_router_stats_of_one_device(const actors::TrainingConfig& config) {
  const int iters = 3;
  const Reference ref = single_device(config, tiny_data(config.model, 512, 7), nullptr, iters, 0);
  const std::vector<IterationStats> run = train_iterations(config, iters);
  for (int it = 0; it < iters; ++it) {
    const MoeIterationStats &r = ref.stats[size_t(it)].moe, &s = run[size_t(it)].moe;
    ASSERT_EQ(s.expert_load.size(), 6u) << "iteration " << it + 1;
    ASSERT_EQ(r.expert_load.size(), 6u);
    EXPECT_GT(r.load_balancing_loss, 0.9);  // ~1 for a balanced router
    EXPECT_GT(r.z_loss, 0.0);
    EXPECT_LT(rel(s.load_balancing_loss, r.load_balancing_loss), 1e-5) << "iteration " << it + 1;
    EXPECT_LT(rel(s.z_loss, r.z_loss), 1e-5) << "iteration " << it + 1;
    for (size_t l = 0; l < r.expert_load.size(); ++l) {
      EXPECT_EQ(s.expert_load[l].layer, r.expert_load[l].layer);
      EXPECT_EQ(s.expert_load[l].tokens_max, r.expert_load[l].tokens_max) << "layer " << r.expert_load[l].layer;
      EXPECT_DOUBLE_EQ(s.expert_load[l].tokens_mean, r.expert_load[l].tokens_mean);
    }
  }
}

}  // namespace troupe::test
