// Fresh prefills on the training causal attention (our flash kernels on tensor cores, never cuDNN)
// in the CUDA inference model, bf16 and f16, against the CPU (f32) and against the same batches
// with every row on paged attention: one prefill of 300 and of 1000 tokens, several of different
// lengths in one batch, and a batch mixing them with decode rows and a prefill chunk continuing a
// cache, then decode steps (CUDA graphs) that read what the prefills cached. GPT-2 (MHA, head dim
// 64), Llama-style (GQA, head dim 64 and 128), Mistral-style (GQA, a sliding window of 20).
// The f32 model keeps paged attention (the tensor-core kernels take bf16 and f16 only).
#include <cstdio>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/op_profiler.hpp"
#include "model/inference/inference_model.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

enum Family { kGpt2, kLlama, kLlamaD128, kMistral };

const char* family_name(Family f) {
  return f == kGpt2 ? "gpt2" : f == kLlama ? "llama" : f == kLlamaD128 ? "llama_d128" : "mistral";
}

// 4 heads: hidden 256 gives head dim 64, 512 gives 128 (the two the fast kernels take).
GptConfig config(Family f) {
  GptConfig c = tiny_inference_config(f != kGpt2, f == kLlamaD128 ? 512 : 256, 1100, 1000);
  if (f == kMistral) c.sliding_window = 20;
  return c;
}

struct PrefillRun {
  std::vector<Tensor> logits;
  bool causal_ran = false;  // the profiler saw the causal path's scope
};

// The prefills op by op under a profiler (to see which attention ran), the decode steps from graphs.
PrefillRun run(InferenceModel& model, const std::vector<MixedSequence>& seqs) {
  OpProfiler profiler(model.context(), true);
  PrefillRun r;
  model.set_profiler(&profiler);
  r.logits = run_mixed_batch(model, seqs, 0, 7);
  profiler.collect();
  r.causal_ran = profiler.totals_ms().count("prefill_attention") > 0;
  model.set_profiler(nullptr);
  // Decode steps after the same prefills, replayed from CUDA graphs.
  const std::vector<Tensor> all = run_mixed_batch(model, seqs, 3, 7);
  r.logits.insert(r.logits.end(), all.end() - 3, all.end());
  return r;
}

double worst_error(const std::vector<Tensor>& got, const std::vector<Tensor>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) worst = std::max(worst, rel_error(got[i], ref[i]));
  return worst;
}

class CausalPrefillCuda : public ::testing::TestWithParam<Family> {};

TEST_P(CausalPrefillCuda, MatchesCpuAndPagedAttention) {
  const GptConfig c = config(GetParam());
  const Tensor w = random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 3, 0.05f);
  const InferenceModelOptions options{.max_tokens = 2048, .max_sequences = 8};
  InferenceModelOptions paged_options = options;
  paged_options.causal_prefill = false;
  InferenceModel on_cpu(cpu(), c, DType::f32, options);
  on_cpu.load_weights(w);
  const std::vector<std::vector<MixedSequence>> cases = {
      {{0, 300}},
      {{0, 1000}},
      {{0, 300}, {0, 517}, {0, 2}},
      {{20, 1}, {0, 300}, {40, 64}, {0, 517}, {33, 1}, {0, 2}},
  };
  std::vector<PrefillRun> refs;
  for (const auto& seqs : cases) refs.push_back(run(on_cpu, seqs));
  for (DType dtype : {DType::bf16, DType::f16}) {
    ASSERT_TRUE(attention_forward_fast(gpu(), dtype, c.head_dim()));
    InferenceModel causal(gpu(), c, dtype, options), paged(gpu(), c, dtype, paged_options);
    causal.load_weights(w);
    paged.load_weights(w);
    const double tolerance = dtype == DType::bf16 ? 3e-2 : 1.5e-2;
    for (size_t k = 0; k < cases.size(); ++k) {
      const PrefillRun& ref = refs[k];
      const PrefillRun got = run(causal, cases[k]), old = run(paged, cases[k]);
      EXPECT_TRUE(got.causal_ran);
      EXPECT_FALSE(old.causal_ran);
      const double vs_cpu = worst_error(got.logits, ref.logits), vs_paged = worst_error(got.logits, old.logits);
      const double paged_vs_cpu = worst_error(old.logits, ref.logits);
      std::printf("%s %s case %zu: causal vs CPU %.2e, causal vs paged %.2e (paged vs CPU %.2e)\n",
                  family_name(GetParam()), dtype_name(dtype), k, vs_cpu, vs_paged, paged_vs_cpu);
      EXPECT_LT(vs_cpu, tolerance);
      EXPECT_LT(vs_paged, tolerance);
    }
  }
  // f32 has no tensor-core attention: its prefills stay on paged attention, exact against the CPU.
  EXPECT_FALSE(attention_forward_fast(gpu(), DType::f32, c.head_dim()));
  InferenceModel exact(gpu(), c, DType::f32, options);
  exact.load_weights(w);
  const PrefillRun got = run(exact, cases[3]);
  EXPECT_FALSE(got.causal_ran);
  EXPECT_LT(worst_error(got.logits, refs[3].logits), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Families, CausalPrefillCuda, ::testing::Values(kGpt2, kLlama, kLlamaD128, kMistral),
                         [](const auto& info) { return family_name(info.param); });

TEST(CausalPrefillCuda, OtherHeadDimsStayPaged) {
  // Head dim 32: the fast kernels do not take it, so the prefill keeps paged attention.
  const GptConfig c = tiny_inference_config(true, 128, 1100, 1000);
  ASSERT_EQ(c.head_dim(), 32);
  EXPECT_FALSE(attention_forward_fast(gpu(), DType::bf16, c.head_dim()));
  InferenceModel model(gpu(), c, DType::bf16, {.max_tokens = 2048, .max_sequences = 8});
  model.load_weights(random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 3, 0.05f));
  EXPECT_FALSE(run(model, {{0, 300}}).causal_ran);
}

}  // namespace
}  // namespace troupe::test
