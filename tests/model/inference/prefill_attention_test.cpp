// Fresh prefills on the training causal attention (InferenceModelOptions::causal_prefill) against
// the same batches with every row on paged attention, on the CPU (f32): one prefill, several of
// different lengths in one batch, and a batch mixing them with decode rows and a prefill chunk
// that continues a cache, then decode steps that read what the prefills cached. GPT-2 (MHA),
// Llama-style (GQA) and Mistral-style (GQA, a sliding window shorter than the prompts).
#include <cstdio>
#include <vector>

#include "kernels/op_profiler.hpp"
#include "model/inference/inference_model.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

enum Family { kGpt2, kLlama, kMistral };

const char* family_name(Family f) { return f == kGpt2 ? "gpt2" : f == kLlama ? "llama" : "mistral"; }

GptConfig config(Family f) {
  GptConfig c = tiny_inference_config(f != kGpt2, 32, 1100, 1000);
  if (f == kMistral) c.sliding_window = 20;
  return c;
}

// Runs `seqs` on `model`, returning the logits and whether the causal path ran (the profiler
// saw its scope).
std::vector<Tensor> run(InferenceModel& model, const std::vector<MixedSequence>& seqs, bool& causal_ran) {
  OpProfiler profiler(model.context(), true);
  model.set_profiler(&profiler);
  std::vector<Tensor> out = run_mixed_batch(model, seqs, 3, 7);
  profiler.collect();
  model.set_profiler(nullptr);
  causal_ran = profiler.totals_ms().count("prefill_attention") > 0;
  return out;
}

class CausalPrefill : public ::testing::TestWithParam<Family> {};

TEST_P(CausalPrefill, MatchesPagedAttention) {
  const GptConfig c = config(GetParam());
  const Tensor w = random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 3, 0.1f);
  InferenceModel causal(cpu(), c, DType::f32, {.max_tokens = 2048, .max_sequences = 8});
  InferenceModel paged(cpu(), c, DType::f32, {.max_tokens = 2048, .max_sequences = 8, .causal_prefill = false});
  causal.load_weights(w);
  paged.load_weights(w);
  const std::vector<std::vector<MixedSequence>> cases = {
      {{0, 300}},                                                // one prefill
      {{0, 1000}},                                               // a long one
      {{0, 300}, {0, 517}, {0, 2}},                              // several of different lengths
      {{20, 1}, {0, 300}, {40, 64}, {0, 517}, {33, 1}, {0, 2}},  // with decode rows and a continued prefill
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    bool causal_ran = false, paged_causal_ran = true;
    const std::vector<Tensor> got = run(causal, cases[k], causal_ran);
    const std::vector<Tensor> ref = run(paged, cases[k], paged_causal_ran);
    EXPECT_TRUE(causal_ran);
    EXPECT_FALSE(paged_causal_ran);
    ASSERT_EQ(got.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, rel_error(got[i], ref[i]));
    std::printf("%s case %zu: causal vs paged max rel err %.2e over %zu forwards\n", family_name(GetParam()), k, worst,
                got.size());
    EXPECT_LT(worst, 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CausalPrefill, ::testing::Values(kGpt2, kLlama, kMistral),
                         [](const auto& info) { return family_name(info.param); });

}  // namespace
}  // namespace troupe::test
