// The MoE aux-loss-free expert bias (--moe-router-enable-expert-bias) under the actor runtime on
// CPU devices:
// - data parallelism: the token counts are summed over the replicas before the update, so DP2
//   (and PP2 x DP2) reproduce the single-device Trainer for 10 iterations (1e-5), where each
//   replica updating from its own counts would move the biases, hence the routing, apart; so do
//   TP2 (each tensor rank routes the group's tokens) and TP2 x SP x DP2;
// - checkpoints: the bias is stored as Megatron's decoder.layers.N.mlp.router.expert_bias
//   (f32 [E]), and 5 iterations + save + load into a new run + 5 give the losses of 10 straight
//   ones bit for bit.
// The bias update rate is large (0.05) so that a bias left out of either shows in the losses.
#include <gtest/gtest.h>

#include "storage/checkpoint_reader.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

struct Case {
  const char* name;
  int P, D;
  double capacity;  // 0: dropless
  int T = 1;        // --tensor-model-parallel-size: each tensor rank counts the group's tokens once
  bool sp = false;  // --sequence-parallel
};

actors::TrainingConfig config_of(const Case& c) {
  actors::TrainingConfig config = tiny_config(true, c.P, 1);
  MoeConfig& m = config.model.moe;
  m.num_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 32;
  m.moe_router_score_function = MoeScoreFunction::sigmoid;
  m.moe_router_load_balancing_type = MoeLoadBalancing::none;
  m.moe_router_enable_expert_bias = true;
  m.moe_router_bias_update_rate = 0.05f;
  m.moe_expert_capacity_factor = c.capacity;
  config.parallel.data_size = c.D;
  config.parallel.tensor_size = c.T;
  config.parallel.sequence_parallel = c.sp;
  config.parallel.distributed_optimizer = c.D > 1;
  config.parallel.overlap_grad_reduce = c.D > 1;
  config.parallel.bucket_elements = 3000;
  return config;
}

class MoeExpertBias : public ::testing::TestWithParam<Case> {};

TEST_P(MoeExpertBias, SameLossAsOneDevice) {
  const Case c = GetParam();
  expect_parity(c.name, config_of(c));
}

INSTANTIATE_TEST_SUITE_P(Layouts, MoeExpertBias,
                         ::testing::Values(Case{"DP2_DistOpt_dropless", 1, 2, 0.0},
                                           Case{"DP2_DistOpt_capacity", 1, 2, 1.0},
                                           Case{"PP2_DP2_DistOpt_dropless", 2, 2, 0.0},
                                           Case{"TP2_SP_DP2_DistOpt_capacity", 1, 2, 1.0, 2, true},
                                           Case{"TP2_dropless", 1, 1, 0.0, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

std::vector<double> losses(actors::TrainingRun& run, int iters) {
  std::vector<double> out;
  for (int i = 0; i < iters; ++i) out.push_back(run.train_iteration().loss);
  return out;
}

TEST(MoeExpertBiasCheckpoint, StoredAndResumedExactly) {
  const actors::TrainingConfig t = config_of({"PP2_DP2", 2, 2, 0.0});
  std::vector<double> straight;
  {
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    straight = losses(run, 10);
  }
  TempDir dir("moe_expert_bias_ckpt");
  {
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    losses(run, 5);
    run.save_checkpoint(dir.path().string());
  }
  // Every MoE layer's bias, whole; not all of them still at their zero init.
  const CheckpointReader r = CheckpointReader::open(dir.path().string());
  float moved = 0;  // the largest |bias| of any layer
  for (int l = 0; l < t.model.num_layers; ++l) {
    const std::string name = "decoder.layers." + std::to_string(l) + ".mlp.router.expert_bias";
    ASSERT_TRUE(r.has(name)) << name;
    const Tensor bias = r.expect(name, {4});
    ASSERT_EQ(bias.dtype(), DType::f32) << name;
    for (int e = 0; e < 4; ++e) moved = std::max(moved, std::abs(bias.data_as<float>()[e]));
  }
  EXPECT_GT(moved, 0.04f) << "no bias moved from its zero init";

  const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(dir.path().string());
  actors::TrainingRun run(t, loader_at(t, meta.consumed_samples), nullptr);
  run.load_checkpoint(dir.path().string());
  const std::vector<double> again = losses(run, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(again[size_t(i)], straight[size_t(i) + 5]) << "iteration " << i + 6;
}

}  // namespace
}  // namespace troupe::test
