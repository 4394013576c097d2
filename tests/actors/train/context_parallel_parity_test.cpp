// Context parallelism (--context-parallel-size, model/context_parallel.hpp) in the actor runtime
// on CPU devices: CP2, CP4, CP2 x TP2 (sequence parallel), CP2 x PP2 and CP2 x DP2 with the
// distributed optimizer reproduce the single-device Trainer for 10 iterations
// (pipeline_test_util.hpp's expect_parity: loss within 1e-5 relative, grad norm, gathered
// weights, validation loss), for GPT-2 (learned positions) and Llama (RoPE, RMSNorm, SwiGLU, GQA).
// Dropout is on (0.1): its masks follow the global rows, as on one device. Under
// `mpirun -np 2` (ctest: context_parallel_parity_test_np2) the ranks split over two processes, so
// the attention ring crosses processes.
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

// Under mpirun, MPI lives as long as the binary; the runs use it one after another.
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

struct Case {
  const char* name;
  bool llama;
  int C, T, P, D;
};

actors::TrainingConfig config_of(const Case& c) {
  actors::TrainingConfig config = tiny_config(c.llama, c.P, 1);
  config.model.num_layers = 4;  // the test's time: CI has two cores
  config.parallel.context_size = c.C;
  config.parallel.tensor_size = c.T;
  config.parallel.sequence_parallel = c.T > 1;
  config.parallel.data_size = c.D;
  config.parallel.distributed_optimizer = c.D > 1;
  config.parallel.overlap_grad_reduce = c.D > 1;
  config.parallel.bucket_elements = 3000;
  return config;
}

class ContextParallelParity : public ::testing::TestWithParam<Case> {};

TEST_P(ContextParallelParity, SameLossAsOneDevice) {
  const Case c = GetParam();
  // As in parallel_parity_test: tensor parallelism reorders the GEMMs' sums, and Adam lets the grad
  // norm drift further than the loss.
  const Tolerance tol = c.T > 1 ? Tolerance{1e-5, 2e-3, 1e-4} : Tolerance{};
  expect_parity(c.name, config_of(c), tol);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ContextParallelParity,
    ::testing::Values(Case{"gpt2_CP2", false, 2, 1, 1, 1}, Case{"llama_CP2", true, 2, 1, 1, 1},
                      Case{"gpt2_CP4", false, 4, 1, 1, 1}, Case{"llama_CP4", true, 4, 1, 1, 1},
                      Case{"gpt2_CP2_TP2_SP", false, 2, 2, 1, 1}, Case{"llama_CP2_TP2_SP", true, 2, 2, 1, 1},
                      Case{"gpt2_CP2_PP2", false, 2, 1, 2, 1}, Case{"llama_CP2_PP2", true, 2, 1, 2, 1},
                      Case{"gpt2_CP2_DP2_DistOpt", false, 2, 1, 1, 2}, Case{"llama_CP2_DP2_DistOpt", true, 2, 1, 1, 2}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ContextParallelRun, RefusesASequenceThatDoesNotSplitInto2CChunks) {
  actors::TrainingConfig config = config_of({"", false, 2, 1, 1, 1});
  config.parallel.context_size = 3;  // 16 tokens into 6 chunks
  try {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    ADD_FAILURE() << "the run started";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--seq-length (16)"), std::string::npos) << what;
    EXPECT_NE(what.find("--context-parallel-size (2 x 3)"), std::string::npos) << what;
  }
}

// What the ring does not implement stops the run before it starts, naming the flags.
TEST(ContextParallelRun, RefusesSlidingWindows) {
  const auto refused = [](actors::TrainingConfig config, const std::string& named) {
    try {
      actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
      ADD_FAILURE() << "the run started; expected " << named;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  const actors::TrainingConfig cp2 = config_of({"", true, 2, 1, 1, 1});
  actors::TrainingConfig window = cp2;
  window.model.sliding_window = 4;
  refused(window, "--context-parallel-size with a sliding window (--window-size)");
}

}  // namespace
}  // namespace troupe::test
