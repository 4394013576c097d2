// The text sample after training (generate() over a GptChunk, a full forward per token) picks
// tokens with the serving engine's TokenSampler: on the same weights and sampling parameters
// it gives the engine's tokens, greedy and seeded top-k, GPT-2 and Llama-style. A second
// sampling implementation, or a different use of the seed, would make them differ.
#include <vector>

#include "model/gpt_chunk.hpp"
#include "model/inference/inference_engine.hpp"
#include "model/inference/sampler.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

class SamplerMatchesEngine : public ::testing::TestWithParam<bool> {};

TEST_P(SamplerMatchesEngine, SameTokensForTheSameSeed) {
  const bool llama = GetParam();
  const GptConfig c = tiny_inference_config(llama, 32, 40, 50);
  const Tensor w = random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 5, 0.3f);
  GptChunk chunk(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  chunk.load_weights(w);
  InferenceModel model(cpu(), c, DType::f32, {.max_tokens = 64, .max_sequences = 4});
  model.load_weights(w);

  std::vector<SamplingParams> settings(3);
  settings[0].temperature = 0.0f;               // greedy
  settings[1] = training_sample_params(12, 7);  // what `troupe train --sample-tokens` uses
  settings[2].top_k = 5;
  settings[2].seed = 99;
  for (SamplingParams& p : settings) p.max_tokens = 12;
  const std::vector<int32_t> prompt = random_token_list(6, 3, 50);
  for (const SamplingParams& p : settings) {
    const std::vector<int32_t> sampled = generate(chunk, prompt, p);
    const std::vector<EngineOutcome> served = run_engine({&model}, {{prompt, p}});
    ASSERT_EQ(served.size(), 1u);
    EXPECT_EQ(sampled, served[0].tokens) << "temperature " << p.temperature << ", top-k " << p.top_k;
    EXPECT_EQ(int64_t(sampled.size()), p.max_tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, SamplerMatchesEngine, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "llama" : "gpt2"; });

}  // namespace
}  // namespace troupe::test
