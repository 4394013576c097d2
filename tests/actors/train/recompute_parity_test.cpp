// Activation recompute (model/recompute.hpp) composes with every parallel layout on CPU devices:
// TP2 with sequence parallelism, PP2 under 1F1B, PP2 interleaved and DP2 with the distributed
// optimizer, each with full and selective recompute, reproduce the single-device Trainer without
// recompute for 10 iterations (pipeline_test_util.hpp's expect_parity: loss within 1e-5 relative,
// grad norm, gathered weights, validation loss), and log bit for bit the losses of the same layout
// without recompute; and the run gives its chunks the setting.
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

struct Case {
  const char* name;
  bool llama;
  int T, P, V, D;
  RecomputeFlags recompute;
};

RecomputeFlags full(const char* method, int n) { return {.granularity = "full", .method = method, .num_layers = n}; }
RecomputeFlags selective(std::vector<std::string> modules) {
  return {.granularity = "selective", .modules = std::move(modules)};
}

actors::TrainingConfig config_of(const Case& c) {
  actors::TrainingConfig config = tiny_config(c.llama, c.P, c.V);
  config.parallel.tensor_size = c.T;
  config.parallel.sequence_parallel = c.T > 1;
  config.parallel.data_size = c.D;
  config.parallel.distributed_optimizer = c.D > 1;
  config.parallel.overlap_grad_reduce = c.D > 1;
  config.parallel.bucket_elements = 3000;
  return config;
}

class RecomputeParity : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeParity, SameLossAsOneDeviceWithoutRecompute) {
  const Case c = GetParam();
  const actors::TrainingConfig plain = config_of(c);
  actors::TrainingConfig config = plain;
  config.recompute = recompute_config_from_flags(c.recompute);
  // As in parallel_parity_test: tensor parallelism reorders the GEMMs' sums, and Adam lets the grad
  // norm drift further than the loss.
  const Tolerance tol = c.T > 1 ? Tolerance{1e-5, 2e-3, 1e-4} : Tolerance{};
  expect_parity(c.name, config, tol);

  // Against the same layout without recompute: the same bits.
  const int iters = 4;
  const std::vector<IterationStats> with = train_iterations(config, iters);
  const std::vector<IterationStats> without = train_iterations(plain, iters);
  for (int it = 0; it < iters; ++it) {
    EXPECT_EQ(with[size_t(it)].loss, without[size_t(it)].loss) << "iteration " << it + 1;
    EXPECT_EQ(with[size_t(it)].grad_norm, without[size_t(it)].grad_norm) << "iteration " << it + 1;
  }
}

// tiny_model has 8 layers: 4 per stage under PP2, 2 per chunk when interleaved (V = 2).
INSTANTIATE_TEST_SUITE_P(
    Layouts, RecomputeParity,
    ::testing::Values(Case{"gpt2_TP2_SP_full_uniform_3", false, 2, 1, 1, 1, full("uniform", 3)},
                      Case{"llama_TP2_SP_selective_all", true, 2, 1, 1, 1,
                           selective({"core_attn", "layernorm", "mlp"})},
                      Case{"gpt2_PP2_full_block_3", false, 1, 2, 1, 1, full("block", 3)},
                      Case{"llama_PP2_selective_core_attn", true, 1, 2, 1, 1, selective({"core_attn"})},
                      Case{"gpt2_PP2_V2_full_uniform_2", false, 1, 2, 2, 1, full("uniform", 2)},
                      Case{"llama_PP2_V2_selective_layernorm_mlp", true, 1, 2, 2, 1, selective({"layernorm", "mlp"})},
                      Case{"gpt2_DP2_DistOpt_full_uniform_1", false, 1, 1, 1, 2, full("uniform", 1)},
                      Case{"llama_DP2_DistOpt_selective_mlp", true, 1, 1, 1, 2, selective({"mlp"})},
                      Case{"llama_TP2_SP_PP2_DP2_full_block_1", true, 2, 2, 1, 2, full("block", 1)}),
    [](const auto& info) { return std::string(info.param.name); });

// The run hands its setting to every chunk it builds: one the chunks refuse (no layers per group;
// the command line never lets it through) stops the run's construction naming the flag.
TEST(RecomputeParityWiring, TheRunsChunksGetTheSetting) {
  actors::TrainingConfig config = tiny_config(false, 2, 1);
  config.recompute = {.granularity = RecomputeGranularity::full, .method = RecomputeMethod::uniform, .num_layers = 0};
  try {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    ADD_FAILURE() << "the chunks did not get the recompute setting";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--recompute-num-layers"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe::test
