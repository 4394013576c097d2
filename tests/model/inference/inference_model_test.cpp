// The inference model on the CPU against the training forward (GptChunk) on the same flat
// weights, for GPT-2, Llama-style and Qwen3 (q/k norms) configs: a prompt's last logits, decoding token by token
// after a short prefill, and several sequences at different stages in one forward.
#include <vector>

#include "model/gpt_chunk.hpp"
#include "model/inference/inference_model.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Random weights everywhere (biases and norm weights too, so every path counts).
Tensor weights(const GptConfig& c) { return random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 5, 0.3f); }

// The training forward's logits [T, Vp] for one sequence.
Tensor chunk_logits(const GptConfig& c, const Tensor& w, const std::vector<int32_t>& tokens) {
  GptChunk chunk(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  chunk.load_weights(w);
  Tensor t = Tensor::host(DType::i32, {1, int64_t(tokens.size())});
  std::copy(tokens.begin(), tokens.end(), t.data_as<int32_t>());
  ActivationsPtr a = chunk.forward(t, Tensor(), Tensor(), {.training = false});
  Tensor out = Tensor::host(DType::f32, a->logits.shape());
  copy(cpu(), a->logits, out);
  return out;
}

// Mistral: the Llama shape with a sliding window of 5, shorter than the prompts (the prefill and
// the decode steps both see only the window, and cache blocks wholly before it are skipped).
enum Family { kGpt2, kLlama, kQwen3, kMistral };

const char* family_name(Family f) {
  return f == kGpt2 ? "gpt2" : f == kLlama ? "llama" : f == kQwen3 ? "qwen3" : "mistral";
}

GptConfig tiny(Family f) {
  if (f == kQwen3) return tiny_qwen3_inference_config(32, 24, 50);
  GptConfig c = tiny_inference_config(f != kGpt2, 32, 24, 50);
  if (f == kMistral) c.sliding_window = 5;
  return c;
}

std::vector<int32_t> prompt(int64_t n, uint64_t seed, int32_t vocab) { return random_token_list(n, seed, vocab); }

Tensor row(const Tensor& logits, int64_t r) { return logits.slice(r * logits.dim(1), {logits.dim(1)}); }

class InferenceVsTraining : public ::testing::TestWithParam<Family> {};

TEST_P(InferenceVsTraining, PromptLogitsMatch) {
  const GptConfig c = tiny(GetParam());
  const Tensor w = weights(c);
  const std::vector<int32_t> tokens = prompt(11, 1, int32_t(c.vocab_size));
  const Tensor ref = chunk_logits(c, w, tokens);

  InferenceModel model(cpu(), c, DType::f32, {.max_tokens = 64, .max_sequences = 4});
  model.load_weights(w);
  KvCache cache(cpu(), c, DType::f32, 16, 4);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(cache.allocate(cache.blocks_for(11), blocks));
  const std::vector<SequenceInput> batch{{tokens, 0, blocks}};
  const Tensor logits = model.forward(batch, cache);
  ASSERT_EQ(logits.shape(), (Shape{1, c.padded_vocab_size()}));
  const double err = rel_error(row(logits, 0), row(ref, 10));
  std::printf("%s prompt: rel err %.2e\n", family_name(GetParam()), err);
  EXPECT_LT(err, 1e-5);
}

TEST_P(InferenceVsTraining, DecodeStepByStepMatchesFullForward) {
  const GptConfig c = tiny(GetParam());
  const Tensor w = weights(c);
  const int64_t T = 19;
  const std::vector<int32_t> tokens = prompt(T, 2, int32_t(c.vocab_size));
  const Tensor ref = chunk_logits(c, w, tokens);

  InferenceModel model(cpu(), c, DType::f32, {.max_tokens = 64, .max_sequences = 4});
  model.load_weights(w);
  KvCache cache(cpu(), c, DType::f32, 16, 4);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(cache.allocate(cache.blocks_for(T), blocks));
  double worst = 0;
  const int64_t prefill = 3;
  {
    const std::vector<SequenceInput> batch{{std::span(tokens).first(prefill), 0, blocks}};
    worst = rel_error(row(model.forward(batch, cache), 0), row(ref, prefill - 1));
  }
  for (int64_t t = prefill; t < T; ++t) {
    const std::vector<SequenceInput> batch{{std::span(tokens).subspan(size_t(t), 1), t, blocks}};
    worst = std::max(worst, rel_error(row(model.forward(batch, cache), 0), row(ref, t)));
  }
  std::printf("%s decode: max rel err %.2e\n", family_name(GetParam()), worst);
  EXPECT_LT(worst, 1e-5);
}

TEST_P(InferenceVsTraining, MixedBatchMatchesEachSequence) {
  // Sequence a is decoding (its first 9 tokens already cached), b is a whole prefill, c a
  // second prefill chunk: one forward gives each its own last logits.
  const GptConfig c = tiny(GetParam());
  const Tensor w = weights(c);
  const int32_t V = int32_t(c.vocab_size);
  const std::vector<int32_t> a = prompt(10, 3, V), b = prompt(7, 4, V), d = prompt(13, 6, V);
  InferenceModel model(cpu(), c, DType::f32, {.max_tokens = 64, .max_sequences = 4});
  model.load_weights(w);
  KvCache cache(cpu(), c, DType::f32, 16, 4);
  std::vector<int32_t> ba, bb, bd;
  ASSERT_TRUE(cache.allocate(3, ba) && cache.allocate(2, bb) && cache.allocate(4, bd));
  const std::vector<SequenceInput> first{{std::span(a).first(9), 0, ba}, {std::span(d).first(5), 0, bd}};
  model.forward(first, cache);
  const std::vector<SequenceInput> mixed{{std::span(a).last(1), 9, ba}, {b, 0, bb}, {std::span(d).last(8), 5, bd}};
  const Tensor logits = model.forward(mixed, cache);
  const double ea = rel_error(row(logits, 0), row(chunk_logits(c, w, a), 9));
  const double eb = rel_error(row(logits, 1), row(chunk_logits(c, w, b), 6));
  const double ed = rel_error(row(logits, 2), row(chunk_logits(c, w, d), 12));
  std::printf("mixed: rel err %.2e %.2e %.2e\n", ea, eb, ed);
  EXPECT_LT(ea, 1e-5);
  EXPECT_LT(eb, 1e-5);
  EXPECT_LT(ed, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, InferenceVsTraining, ::testing::Values(kGpt2, kLlama, kQwen3, kMistral),
                         [](const auto& info) { return family_name(info.param); });

TEST(InferenceModelChecks, BadBatchesAreErrors) {
  const GptConfig c = tiny(kGpt2);
  InferenceModel model(cpu(), c, DType::f32, {.max_tokens = 8, .max_sequences = 2});
  KvCache cache(cpu(), c, DType::f32, 16, 4);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(cache.allocate(2, blocks));
  const std::vector<int32_t> nine(9, 1), three{1, 2, 3}, bad{1, 99};
  EXPECT_THROW(model.forward(std::vector<SequenceInput>{{nine, 0, blocks}}, cache), Error);    // > max_tokens
  EXPECT_THROW(model.forward(std::vector<SequenceInput>{{three, 6, blocks}}, cache), Error);   // blocks short
  EXPECT_THROW(model.forward(std::vector<SequenceInput>{{bad, 0, blocks}}, cache), Error);     // token id
  EXPECT_THROW(model.forward(std::vector<SequenceInput>{{three, 23, blocks}}, cache), Error);  // past positions
  EXPECT_NO_THROW(model.forward(std::vector<SequenceInput>{{three, 5, blocks}}, cache));
  KvCache half(cpu(), c, DType::bf16, 4, 4);
  EXPECT_THROW(model.forward(std::vector<SequenceInput>{{three, 0, blocks}}, half), Error);  // dtype
}

TEST(KvCacheBlocks, AllocateAllOrNothingAndReleaseOnce) {
  const GptConfig c = tiny(kLlama);
  KvCache cache(cpu(), c, DType::f32, 5, 4);
  EXPECT_EQ(cache.k(1).shape(), (Shape{6, 4, 2, 8}));  // + the scratch block
  EXPECT_EQ(cache.scratch_block(), 5);
  EXPECT_EQ(cache.blocks_for(9), 3);
  std::vector<int32_t> a, b;
  EXPECT_TRUE(cache.allocate(3, a));
  EXPECT_FALSE(cache.allocate(3, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(cache.free_blocks(), 2);
  std::vector<int32_t> again = a;
  cache.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(cache.free_blocks(), 5);
  EXPECT_THROW(cache.release(again), Error);
  EXPECT_EQ(KvCache::blocks_in_bytes(c, DType::bf16, 16, 2 * 2 * 16 * 2 * 8 * 2 * 10), 10);
}

}  // namespace
}  // namespace troupe::test
