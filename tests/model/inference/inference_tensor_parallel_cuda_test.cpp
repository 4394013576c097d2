// A tensor-parallel inference replica on two GPUs (NCCL all-reduces, one thread per rank)
// against one CPU device on the same weights: in f32 the engine over the TP2 group gives the
// CPU's greedy and seeded tokens and log-probs, with decode steps replayed from CUDA graphs
// (the all-reduces captured in them) and run op by op; in bf16 the graph replays give exactly
// the logits of the same steps run op by op. GPT-2 and Llama-style models. Skipped below two GPUs.
#include <cmath>
#include <cstdio>
#include <memory>
#include <tuple>

#include "apps/common/inference_flags.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif
#include "model/inference/inference_model.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// A TP replica on GPUs 0 .. T-1, built as `troupe serve --tensor-model-parallel-size T` builds one.
std::shared_ptr<apps::ReplicaModels> replica(const GptConfig& c, const Tensor& weights, DType dtype, int T,
                                             bool graphs) {
  apps::InferenceFlags flags;
  flags.tensor_parallel = T;
  apps::InferenceSetup setup;
  setup.model.config = c;
  setup.model.weights = weights;
  setup.cuda = true;
  setup.compute = dtype;
  return apps::make_replica_models(flags, setup, 0, {.max_tokens = 64, .max_sequences = 8, .cuda_graphs = graphs});
}

int gpus() {
#if TROUPE_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

class EngineTensorParallelCuda : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

TEST_P(EngineTensorParallelCuda, TwoGpusGenerateWhatTheCpuDoes) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const auto [llama, greedy, graphs] = GetParam();
  const GptConfig c = tiny_inference_config(llama, 128, 128, 1000);
  const Tensor w = random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 7, 0.3f);
  const std::vector<GenerationRequest> requests = engine_requests(greedy);

  InferenceModel one(cpu(), c, DType::f32, {.max_tokens = 64, .max_sequences = 8});
  one.load_weights(w);
  const std::vector<EngineOutcome> ref = run_engine({&one}, requests);

  const auto tp = replica(c, w, DType::f32, 2, graphs);
  const std::vector<EngineOutcome> got = run_engine(tp->ranks(), requests);
  const double worst = expect_same_tokens(got, ref);
  if (graphs) {
    EXPECT_GT(tp->models[0]->cuda_graphs_captured(), 0u) << "decode steps never ran from a graph";
    EXPECT_EQ(tp->models[0]->cuda_graphs_captured(), tp->models[1]->cuda_graphs_captured());
  }
  std::printf("%s TP2 f32 %s %s: tokens equal to the CPU's, max |logprob diff| %.2e\n", llama ? "llama" : "gpt2",
              greedy ? "greedy" : "sampled", graphs ? "graphs" : "op by op", worst);
  EXPECT_LT(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineTensorParallelCuda,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return str_cat(std::get<0>(info.param) ? "llama" : "gpt2",
                                          std::get<1>(info.param) ? "_greedy" : "_sampled",
                                          std::get<2>(info.param) ? "_graphs" : "_eager");
                         });

// bf16 decode steps of a TP2 group: replayed graphs give the op-by-op logits bit for bit.
TEST(InferenceTensorParallelCuda, GraphReplaysEqualOpByOpDecode) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (bool llama : {false, true}) {
    const GptConfig c = tiny_inference_config(llama, 128, 128, 1000);
    const Tensor w = random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 9, 0.05f);
    std::vector<std::vector<Tensor>> logits;  // [mode][rank * steps]
    for (bool graphs : {false, true}) {
      const auto tp = replica(c, w, DType::bf16, 2, graphs);
      std::vector<Tensor> mine(2 * 6);
      run_threads(2, [&](int r) {
        InferenceModel& m = *tp->models[size_t(r)];
        m.context().activate();
        KvCache cache(m.context(), c, DType::bf16, 32, 16, 2);
        std::vector<std::vector<int32_t>> blocks(3);
        std::vector<std::vector<int32_t>> tokens;
        for (int s = 0; s < 3; ++s) {
          EXPECT_TRUE(cache.allocate(2, blocks[size_t(s)]));
          tokens.push_back(random_token_list(4 + 5 * s, uint64_t(30 + s), 1000));
        }
        std::vector<int64_t> cached(3, 0);
        for (int step = 0; step < 6; ++step) {  // a prefill, then 5 decode steps of 3 sequences
          std::vector<SequenceInput> batch;
          for (size_t s = 0; s < 3; ++s)
            batch.push_back({std::span(tokens[s]).subspan(size_t(cached[s])), cached[s], blocks[s]});
          mine[size_t(r) * 6 + size_t(step)] = to_host_f32(m.context(), m.forward(batch, cache));
          for (size_t s = 0; s < 3; ++s) {
            cached[s] = int64_t(tokens[s].size());
            tokens[s].push_back(int32_t((step * 7 + int(s) * 13) % 1000));
          }
        }
      });
      if (graphs) {
        EXPECT_GT(tp->models[0]->cuda_graphs_captured(), 0u);
      }
      logits.push_back(std::move(mine));
    }
    double worst = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) worst = std::max(worst, rel_error(logits[1][i], logits[0][i]));
    std::printf("%s TP2 bf16: graph replays vs op by op, max relative difference %.2e\n", llama ? "llama" : "gpt2",
                worst);
    EXPECT_EQ(worst, 0.0);
  }
}

}  // namespace
}  // namespace troupe::test
