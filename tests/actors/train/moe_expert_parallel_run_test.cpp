// Expert parallelism under the actor runtime on CPU devices (--expert-model-parallel-size): the
// experts of each MoE layer split over consecutive data ranks, tokens exchanged all-to-all, the
// experts' gradients reduced over the ranks holding the same experts. EP2 (DP2), EP4 (DP4), EP2
// with DP4, EP2 x PP2 (1F1B and interleaved; the expert group's ranks of a stage run their
// ops in one order) and EP2 with the distributed optimizer (experts' gradients reduce-scattered
// over their expert-data-parallel group, their state sharded over it), dropless and with
// capacity dropping, reproduce the single-device
// Trainer for 10 iterations (pipeline_test_util.hpp's expect_parity: loss within 1e-5 relative,
// grad norm, gathered weights, validation loss); checkpoints load across expert layouts. So do
// MoE layers under tensor parallelism (Megatron's default expert-tensor-parallel size = TP: each
// expert split like the dense MLP, the router seeing the group's tokens, gathered under
// --sequence-parallel) with a shared expert (gated or not), and EP x TP (the all-to-all over the
// expert group of each tensor rank), with DP, the distributed optimizer and PP; checkpoints
// load across TP and EP x TP layouts. What is not implemented is refused by flag name. Under
// `mpirun -np 2` (ctest: moe_expert_parallel_run_test_np2) the layouts split their ranks over the
// two processes: EP2 x DP2's expert group crosses them (the rows move over MPI), EP2 x DP4's
// expert-data-parallel groups do.
#include "actors/train/checkpoint_shards.hpp"
#include "storage/checkpoint_reader.hpp"
#include "tests/actors/train/moe_test_model.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Under mpirun, MPI lives as long as the binary; the runs use it one after another.
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

struct Case {
  const char* name;
  int P, D, EP;
  double capacity;  // 0: dropless
  bool shared_expert;
  bool overlap = false;   // --overlap-grad-reduce: the reducer actors split each bucket too
  int V = 1;              // model chunks per stage (> 1: interleaved 1F1B)
  bool dist_opt = false;  // --use-distributed-optimizer: experts sharded over their expert-data-parallel group
  int T = 1;              // --tensor-model-parallel-size (the experts split over it too)
  bool sp = false;        // --sequence-parallel
  bool gate = false;      // --moe-shared-expert-gate (with shared_expert)
};

actors::TrainingConfig config_of(const Case& c) {
  actors::TrainingConfig config = tiny_config(true, c.P, c.V);
  set_test_moe(config.model.moe, c.capacity, c.shared_expert);
  config.model.moe.moe_shared_expert_gate = c.gate;
  config.parallel.tensor_size = c.T;
  config.parallel.sequence_parallel = c.sp;
  config.parallel.data_size = c.D;
  config.parallel.expert_size = c.EP;
  config.parallel.overlap_grad_reduce = c.overlap;
  config.parallel.distributed_optimizer = c.dist_opt;
  config.parallel.bucket_elements = 3000;  // buckets cutting through the experts' runs
  return config;
}

class MoeExpertParallelParity : public ::testing::TestWithParam<Case> {};

TEST_P(MoeExpertParallelParity, SameLossAsOneDevice) { expect_parity(GetParam().name, config_of(GetParam())); }

// tiny_model has 8 layers (6 MoE). Capacity 1.0 with top-2 of 4 experts drops the choices beyond
// each expert's even share.
INSTANTIATE_TEST_SUITE_P(Layouts, MoeExpertParallelParity,
                         ::testing::Values(Case{"EP2_DP2_dropless", 1, 2, 2, 0.0, true},
                                           Case{"EP2_DP2_capacity", 1, 2, 2, 1.0, false},
                                           Case{"EP4_DP4_dropless", 1, 4, 4, 0.0, false},
                                           Case{"EP2_DP4_capacity", 1, 4, 2, 1.0, true},
                                           Case{"EP2_DP4_dropless", 1, 4, 2, 0.0, false},
                                           Case{"EP2_DP4_overlap_capacity", 1, 4, 2, 1.0, true, true},
                                           Case{"EP2_DP2_overlap_dropless", 1, 2, 2, 0.0, false, true},
                                           Case{"EP2_PP2_DP2_dropless", 2, 2, 2, 0.0, true},
                                           Case{"EP2_PP2_DP2_capacity", 2, 2, 2, 1.0, false},
                                           Case{"EP2_PP2_DP4_overlap_capacity", 2, 4, 2, 1.0, true, true},
                                           Case{"EP2_PP2_VPP2_DP2_dropless", 2, 2, 2, 0.0, false, false, 2},
                                           Case{"EP2_PP2_VPP2_DP2_capacity", 2, 2, 2, 1.0, true, true, 2},
                                           Case{"EP2_DP4_distopt_dropless", 1, 4, 2, 0.0, true, false, 1, true},
                                           Case{"EP2_DP4_distopt_overlap_capacity", 1, 4, 2, 1.0, false, true, 1, true},
                                           Case{"EP2_DP2_distopt_overlap_dropless", 1, 2, 2, 0.0, true, true, 1, true},
                                           Case{"EP2_PP2_DP4_distopt_capacity", 2, 4, 2, 1.0, true, false, 1, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// Tensor parallelism (EP 1), and expert parallelism inside each tensor rank (EP x TP).
INSTANTIATE_TEST_SUITE_P(
    TensorLayouts, MoeExpertParallelParity,
    ::testing::Values(Case{"TP2_dropless", 1, 1, 1, 0.0, true, false, 1, false, 2, false, false},
                      Case{"TP2_capacity_gate", 1, 1, 1, 1.0, true, false, 1, false, 2, false, true},
                      Case{"TP2_SP_dropless_gate", 1, 1, 1, 0.0, true, false, 1, false, 2, true, true},
                      Case{"TP2_SP_capacity", 1, 1, 1, 1.0, true, false, 1, false, 2, true, false},
                      Case{"TP2_SP_DP2_distopt_capacity", 1, 2, 1, 1.0, true, true, 1, true, 2, true, false},
                      Case{"EP2_TP2_SP_dropless", 1, 2, 2, 0.0, true, false, 1, false, 2, true, false},
                      Case{"EP2_TP2_SP_capacity", 1, 2, 2, 1.0, true, false, 1, false, 2, true, true},
                      Case{"EP2_TP2_capacity", 1, 2, 2, 1.0, false, false, 1, false, 2, false, false},
                      Case{"EP2_TP2_DP2_SP_dropless", 1, 4, 2, 0.0, true, false, 1, false, 2, true, false},
                      Case{"EP2_TP2_DP2_SP_overlap_capacity", 1, 4, 2, 1.0, true, true, 1, false, 2, true, false},
                      Case{"EP2_TP2_SP_distopt_dropless", 1, 2, 2, 0.0, true, false, 1, true, 2, true, false},
                      Case{"EP2_TP2_DP2_SP_distopt_capacity", 1, 4, 2, 1.0, true, true, 1, true, 2, true, true},
                      Case{"EP2_TP2_PP2_SP_dropless", 2, 2, 2, 0.0, true, false, 1, false, 2, true, false}),
    [](const auto& info) { return std::string(info.param.name); });

// Whether `text` holds every one of `parts`.
::testing::AssertionResult mentions(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* part : parts)
    if (text.find(part) == std::string::npos)
      return ::testing::AssertionFailure() << "\"" << text << "\" lacks " << part;
  return ::testing::AssertionSuccess();
}

// The error TrainingRun's constructor throws for `config`.
std::string refusal(const actors::TrainingConfig& config) {
  try {
    train_iterations(config, 1);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(MoeExpertParallelRefusals, NameTheFlags) {
  actors::TrainingConfig c = config_of({"", 1, 3, 3, 0.0, false});  // 4 experts over 3
  c.global_batch_size = 6;
  EXPECT_TRUE(mentions(refusal(c), {"--expert-model-parallel-size 3", "--num-experts 4"}));
  c = config_of({"", 1, 3, 2, 0.0, false});  // EP2 in DP3
  c.global_batch_size = 6;
  EXPECT_TRUE(mentions(refusal(c), {"--expert-model-parallel-size 2", "data-parallel size 3"}));
  c = config_of({"", 1, 2, 2, 0.0, false});
  c.parallel.tensor_size = 2;
  c.parallel.expert_tensor_size = 1;  // only the default (= TP) is implemented
  EXPECT_TRUE(mentions(refusal(c), {"--expert-tensor-parallel-size 1", "--tensor-model-parallel-size 2"}));
  // Each expert's TP shard must stay a 64-aligned run: 8 / 2 rows x 40 is not.
  GptConfig m = config_of({"", 1, 1, 1, 0.0, false}).model;
  m.hidden_size = 40;
  m.moe.moe_ffn_hidden_size = 8;
  try {
    m.validate_tensor_parallel(2);
    ADD_FAILURE() << "accepted";
  } catch (const std::exception& e) {
    EXPECT_TRUE(mentions(e.what(), {"--moe-ffn-hidden-size (8)", "--tensor-model-parallel-size (2)"}));
  }
}

std::vector<double> losses(actors::TrainingRun& run, int iters) {
  std::vector<double> out;
  for (int i = 0; i < iters; ++i) out.push_back(run.train_iteration().loss);
  return out;
}

// A checkpoint stores every expert once under its global name, whatever expert layout saved it
// (the distributed optimizer's shards included), and loads into any other: saved after 3
// iterations by `from`, resumed by `to`, iterations 4..6 equal the uninterrupted run's.
TEST(MoeExpertParallelCheckpoint, LoadsAcrossExpertLayouts) {
  const Case ep1{"EP1_DP2", 1, 2, 1, 0.0, true}, ep2{"EP2_DP2", 1, 2, 2, 0.0, true},
      ep2_dp4{"EP2_DP4", 1, 4, 2, 0.0, true}, ep2_dp4_distopt{"EP2_DP4_distopt", 1, 4, 2, 0.0, true, true, 1, true},
      ep1_dp2_distopt{"EP1_DP2_distopt", 1, 2, 1, 0.0, true, false, 1, true},
      tp2{"TP2_DP2", 1, 2, 1, 0.0, true, false, 1, false, 2},
      tp2_sp{"TP2_SP_DP2", 1, 2, 1, 0.0, true, false, 1, false, 2, true},
      ep2_tp2{"EP2_TP2_SP", 1, 2, 2, 0.0, true, false, 1, false, 2, true},
      ep2_tp2_distopt{"EP2_TP2_distopt", 1, 2, 2, 0.0, true, false, 1, true, 2};
  std::vector<double> straight;
  {
    const actors::TrainingConfig t = config_of(ep2);
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    straight = losses(run, 6);
  }
  const std::vector<std::pair<Case, Case>> moves = {{ep2, ep1},
                                                    {ep1, ep2},
                                                    {ep2, ep2_dp4},
                                                    {ep2_dp4_distopt, ep1},
                                                    {ep1_dp2_distopt, ep2_dp4_distopt},
                                                    {ep2, ep2_dp4_distopt},
                                                    {tp2, ep1},
                                                    {ep1, tp2_sp},
                                                    {ep2_tp2, ep1},
                                                    {ep2_tp2_distopt, ep2},
                                                    {ep2, ep2_tp2}};
  for (const auto& [from, to] : moves) {
    const std::string label = std::string(from.name) + " -> " + to.name;
    TempDir dir("moe_ep_ckpt");
    {
      const actors::TrainingConfig t = config_of(from);
      actors::TrainingRun run(t, loader_at(t, 0), nullptr);
      losses(run, 3);
      run.save_checkpoint(dir.path().string());
    }
    const CheckpointReader r = CheckpointReader::open(dir.path().string());
    for (int l : {0, 1, 2, 4, 5, 6})  // the MoE layers of ([1]*3+[0])*2
      for (int e = 0; e < 4; ++e)
        for (const char* linear : {"linear_fc1", "linear_fc2"}) {
          const std::string name = moe_expert_name("decoder.layers." + std::to_string(l) + ".mlp.", e, linear);
          EXPECT_TRUE(r.has(name)) << label << ": " << name;
          EXPECT_TRUE(r.has(actors::kExpAvgPrefix + name)) << label << ": " << name;
        }
    const actors::TrainingConfig t = config_of(to);
    const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(dir.path().string());
    actors::TrainingRun run(t, loader_at(t, meta.consumed_samples), nullptr);
    run.load_checkpoint(dir.path().string());
    const std::vector<double> again = losses(run, 3);
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(rel(again[size_t(i)], straight[size_t(i) + 3]), 1e-5) << label << ": iteration " << i + 4;
  }
}

}  // namespace
}  // namespace troupe::test
