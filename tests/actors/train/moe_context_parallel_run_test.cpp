// Mixture-of-experts layers under context parallelism (--context-parallel-size with
// --num-experts) in the actor runtime on CPU devices: each context rank routes its pieces of the
// sequences, the routers' load-balancing counts (per microbatch for aux_loss, per sequence for
// seq_aux_loss) are summed over the context group before the loss, the z-loss is the
// microbatch's mean, and the expert-bias counts are summed over the data x context group. CP2
// and CP4 alone, CP2 x EP2 (the expert group carved out of the context ranks, Megatron's
// expert grid), CP2 x EP2 x DP2 and CP2 x EP4 x DP2 (expert groups across data ranks; evaluation
// on the data ranks they span), CP2 x TP2 (sequence parallel), CP2 x PP2 and CP2 x DP2 with the
// distributed optimizer reproduce the single-device Trainer for 10 iterations
// (pipeline_test_util.hpp's expect_parity: loss within 1e-5 relative, grad norm, gathered
// weights, validation loss), for softmax top-2 with aux_loss and the z-loss, sigmoid with the
// expert bias, a shared expert and aux_loss, and seq_aux_loss; and log the single device's
// router statistics (load-balancing loss, z-loss, expert load). Capacity dropping is refused
// naming both flags. Under `mpirun -np 2` (ctest: moe_context_parallel_run_test_np2) the ranks
// split over two processes, so the context group (and the expert group) crosses them (the
// losses only: the statistics cover process 0's devices there).
#include "actors/fabric/fabric.hpp"
#include "tests/actors/train/moe_test_model.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

// Under mpirun, MPI lives as long as the binary; the runs use it one after another.
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

enum class Router {
  softmax_aux_z,        // softmax top-2, aux_loss and z-loss (set_test_moe)
  sigmoid_bias_shared,  // sigmoid top-2, the expert bias, a shared expert, aux_loss and z-loss
  seq_aux_z,            // softmax top-2, seq_aux_loss and z-loss, a shared expert
};

struct Case {
  const char* name;
  Router router;
  int C, EP = 1, D = 1, T = 1, P = 1;
};

actors::TrainingConfig config_of(const Case& c) {
  actors::TrainingConfig config = tiny_config(true, c.P, 1);
  MoeConfig& m = config.model.moe;
  set_test_moe(m, /*capacity=*/0.0, /*shared_expert=*/c.router != Router::softmax_aux_z);
  if (c.router == Router::sigmoid_bias_shared) {
    m.moe_router_score_function = MoeScoreFunction::sigmoid;
    m.moe_router_enable_expert_bias = true;
    m.moe_router_bias_update_rate = 0.05f;  // large: a bias updated from one rank's counts shows in the losses
  }
  if (c.router == Router::seq_aux_z) m.moe_router_load_balancing_type = MoeLoadBalancing::seq_aux_loss;
  config.parallel.context_size = c.C;
  config.parallel.expert_size = c.EP;
  config.parallel.data_size = c.D;
  config.parallel.tensor_size = c.T;
  config.parallel.sequence_parallel = c.T > 1;
  config.parallel.distributed_optimizer = c.D > 1;
  config.parallel.overlap_grad_reduce = c.D > 1;
  config.parallel.bucket_elements = 3000;
  return config;
}

class MoeContextParallelParity : public ::testing::TestWithParam<Case> {};

TEST_P(MoeContextParallelParity, SameLossAsOneDevice) {
  const Case c = GetParam();
  const actors::TrainingConfig config = config_of(c);
  // As in context_parallel_parity_test: tensor parallelism reorders the GEMMs' sums, and Adam lets
  // the grad norm drift further than the loss.
  expect_parity(c.name, config, c.T > 1 ? Tolerance{1e-5, 2e-3, 1e-4} : Tolerance{});

  // The statistics the log line shows; under mpirun they cover process 0's devices only
  // (docs/train.md), so a single process checks them.
  if (test_fabric()->processes() == 1) expect_router_stats_of_one_device(config);
}

// tiny_model: 8 layers, 6 of them MoE, 16 tokens a sequence (CP2: two chunks of 4 per rank).
INSTANTIATE_TEST_SUITE_P(
    Layouts, MoeContextParallelParity,
    ::testing::Values(Case{"CP2_softmax_aux_z", Router::softmax_aux_z, 2},
                      Case{"CP2_sigmoid_bias_shared", Router::sigmoid_bias_shared, 2},
                      Case{"CP2_seq_aux_z", Router::seq_aux_z, 2}, Case{"CP4_seq_aux_z", Router::seq_aux_z, 4},
                      Case{"CP2_EP2_softmax_aux_z", Router::softmax_aux_z, 2, 2},
                      Case{"CP2_EP2_sigmoid_bias_shared", Router::sigmoid_bias_shared, 2, 2},
                      Case{"CP2_EP2_seq_aux_z", Router::seq_aux_z, 2, 2},
                      Case{"CP2_EP2_DP2_distopt_softmax_aux_z", Router::softmax_aux_z, 2, 2, 2},
                      Case{"CP2_EP4_DP2_distopt_seq_aux_z", Router::seq_aux_z, 2, 4, 2},
                      Case{"CP2_DP2_distopt_sigmoid_bias_shared", Router::sigmoid_bias_shared, 2, 1, 2},
                      Case{"CP2_TP2_SP_softmax_aux_z", Router::softmax_aux_z, 2, 1, 1, 2},
                      Case{"CP2_TP2_SP_sigmoid_bias_shared", Router::sigmoid_bias_shared, 2, 1, 1, 2},
                      Case{"CP2_TP2_SP_seq_aux_z", Router::seq_aux_z, 2, 1, 1, 2},
                      Case{"CP2_PP2_seq_aux_z", Router::seq_aux_z, 2, 1, 1, 1, 2}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(MoeContextParallelRun, RefusesCapacityDroppingNamingBothFlags) {
  actors::TrainingConfig config = config_of({"", Router::softmax_aux_z, 2});
  config.model.moe.moe_expert_capacity_factor = 1.0;
  try {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    ADD_FAILURE() << "the run started";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--moe-expert-capacity-factor"), std::string::npos) << what;
    EXPECT_NE(what.find("--context-parallel-size 2"), std::string::npos) << what;
  }
}

TEST(MoeContextParallelRun, RefusesAnExpertGroupThatDoesNotDivideTheDataAndContextRanks) {
  actors::TrainingConfig config = config_of({"", Router::softmax_aux_z, 2, 4});  // EP4 over 1 x 2 ranks
  try {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    ADD_FAILURE() << "the run started";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--expert-model-parallel-size 4"), std::string::npos) << what;
    EXPECT_NE(what.find("--context-parallel-size (1 x 2)"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace troupe::test
