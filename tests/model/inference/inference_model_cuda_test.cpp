// The inference model on CUDA (bf16, and f32) against the CPU (f32) on the same weights (GPT-2,
// Llama-style, Qwen3 with its q/k norms inside the captured decode graphs), and
// decode steps replayed from CUDA graphs against the same steps run op by op, for batch sizes
// that fill a bucket and that need padding (3 sequences in the bucket of 4).
#include <cstdio>
#include <vector>

#include "model/inference/inference_model.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

std::vector<int32_t> prompt(int64_t n, uint64_t seed) { return random_token_list(n, seed, 1000); }

// Runs `steps` forwards of S sequences on `model` (a prefill of different lengths, then decode
// steps feeding `feed[step][s]`), returning every step's logits on the host.
std::vector<Tensor> run_steps(InferenceModel& model, const std::vector<std::vector<int32_t>>& prompts,
                              const std::vector<std::vector<int32_t>>& feed) {
  const GptConfig& c = model.config();
  KvCache cache(model.context(), c, model.compute_dtype(), 64, 16);
  std::vector<std::vector<int32_t>> blocks(prompts.size()), tokens = prompts;
  for (auto& b : blocks) EXPECT_TRUE(cache.allocate(4, b));
  std::vector<Tensor> out;
  std::vector<int64_t> cached(prompts.size(), 0);
  for (size_t step = 0; step <= feed.size(); ++step) {
    if (step > 0)
      for (size_t s = 0; s < prompts.size(); ++s) tokens[s].push_back(feed[step - 1][s]);
    std::vector<SequenceInput> batch;
    for (size_t s = 0; s < prompts.size(); ++s)
      batch.push_back({std::span(tokens[s]).subspan(size_t(cached[s])), cached[s], blocks[s]});
    out.push_back(to_host_f32(model.context(), model.forward(batch, cache)));
    for (size_t s = 0; s < prompts.size(); ++s) cached[s] = int64_t(tokens[s].size());
  }
  return out;
}

enum Family { kGpt2, kLlama, kQwen3, kMistral };  // Mistral: Llama with a sliding window of 20

const char* family_name(Family f) {
  return f == kGpt2 ? "gpt2" : f == kLlama ? "llama" : f == kQwen3 ? "qwen3" : "mistral";
}

class InferenceCuda : public ::testing::TestWithParam<Family> {};

TEST_P(InferenceCuda, MatchesCpuAndGraphsMatchEagerDecode) {
  GptConfig c = GetParam() == kQwen3 ? tiny_qwen3_inference_config(128, 128, 1000)
                                     : tiny_inference_config(GetParam() != kGpt2, 128, 128, 1000);
  if (GetParam() == kMistral) c.sliding_window = 20;
  const Tensor w = random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 3, 0.05f);
  InferenceModel on_cpu(cpu(), c, DType::f32, {.max_tokens = 256, .max_sequences = 8});
  InferenceModel eager(gpu(), c, DType::bf16, {.max_tokens = 256, .max_sequences = 8, .cuda_graphs = false});
  InferenceModel graphs(gpu(), c, DType::bf16, {.max_tokens = 256, .max_sequences = 8});
  InferenceModel exact(gpu(), c, DType::f32, {.max_tokens = 256, .max_sequences = 8});  // f32, graphs
  for (InferenceModel* m : {&on_cpu, &eager, &graphs, &exact}) m->load_weights(w);

  for (int S : {2, 3}) {  // a full bucket, and a padded one
    std::vector<std::vector<int32_t>> prompts;
    for (int s = 0; s < S; ++s) prompts.push_back(prompt(5 + 17 * s, uint64_t(10 * S + s)));
    std::vector<std::vector<int32_t>> feed;
    for (int step = 0; step < 6; ++step) feed.push_back(prompt(S, 100 + uint64_t(step)));
    const std::vector<Tensor> ref = run_steps(on_cpu, prompts, feed);
    const std::vector<Tensor> e = run_steps(eager, prompts, feed);
    const std::vector<Tensor> g = run_steps(graphs, prompts, feed);
    const std::vector<Tensor> f = run_steps(exact, prompts, feed);
    double worst_cpu = 0, worst_graph = 0, worst_f32 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst_cpu = std::max(worst_cpu, rel_error(e[i], ref[i]));
      worst_graph = std::max(worst_graph, rel_error(g[i], e[i]));
      worst_f32 = std::max(worst_f32, rel_error(f[i], ref[i]));
    }
    std::printf("%s S=%d: CUDA bf16 vs CPU f32 max rel err %.2e, graph vs eager %.2e, CUDA f32 vs CPU f32 %.2e\n",
                family_name(GetParam()), S, worst_cpu, worst_graph, worst_f32);
    EXPECT_LT(worst_cpu, 3e-2);
    EXPECT_LT(worst_graph, 1e-2);
    EXPECT_LT(worst_f32, 1e-5);  // the same arithmetic in another order (f32 GEMMs without TF32)
  }
  EXPECT_GE(graphs.cuda_graphs_captured(), 1u);  // each run has its own cache: its graphs were recaptured
  EXPECT_EQ(eager.cuda_graphs_captured(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Families, InferenceCuda, ::testing::Values(kGpt2, kLlama, kQwen3, kMistral),
                         [](const auto& info) { return family_name(info.param); });

}  // namespace
}  // namespace troupe::test
