// The logits processors of SamplingParams (model/inference/sampling.hpp), with OpenAI's and
// vLLM's semantics: frequency / presence penalties over the generated tokens, the repetition
// penalty over prompt + generated tokens, logit_bias added, stop tokens masked until
// min_tokens; and top_logprobs, the k most likely tokens in order.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/check.hpp"
#include "model/inference/sampling.hpp"

namespace troupe::test {
namespace {

TEST(LogitsProcessors, FrequencyAndPresencePenaltiesCountGeneratedTokensOnly) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<float> logits(6, 1.0f);
  const std::vector<int32_t> tokens = {1, 1, 2, 2, 3};  // prompt {1, 1}; generated {2, 2, 3}
  std::vector<int32_t> scratch;
  apply_logits_processors(p, logits, tokens, 2, scratch);
  EXPECT_FLOAT_EQ(logits[1], 1.0f);                     // only in the prompt
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 2 * 0.5f - 0.25f);  // generated twice
  EXPECT_FLOAT_EQ(logits[3], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[4], 1.0f);
}

TEST(LogitsProcessors, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOnce) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  std::vector<float> logits = {4.0f, -4.0f, 4.0f, 3.0f};
  const std::vector<int32_t> tokens = {0, 0, 1};  // token 0 in the prompt twice, 1 generated
  std::vector<int32_t> scratch;
  apply_logits_processors(p, logits, tokens, 2, scratch);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);
  EXPECT_FLOAT_EQ(logits[1], -8.0f);
  EXPECT_FLOAT_EQ(logits[2], 4.0f);
  EXPECT_FLOAT_EQ(logits[3], 3.0f);
}

TEST(LogitsProcessors, LogitBiasAndMinTokensSteerTheGreedyPick) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.stop_tokens = {0};
  p.min_tokens = 2;
  p.logit_bias = {{3, 10.0f}};
  const std::vector<float> logits = {9.0f, 1.0f, 2.0f, 0.5f};
  EXPECT_TRUE(p.adjusts_logits());
  EXPECT_FALSE(p.device_greedy());
  TokenSampler s(p);
  // One token generated so far: the stop token 0 is masked, and token 3 has +10.
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{7, 3}, 1).token, 3);
  p.logit_bias.clear();
  TokenSampler masked(p);
  EXPECT_EQ(masked.sample(logits, std::vector<int32_t>{7, 3}, 1).token, 2);     // 0 masked: 2 is next
  EXPECT_EQ(masked.sample(logits, std::vector<int32_t>{7, 3, 2}, 1).token, 0);  // min_tokens reached
  std::vector<float> row = logits;
  std::vector<int32_t> scratch;
  apply_logits_processors(p, row, std::vector<int32_t>{7}, 1, scratch);
  EXPECT_EQ(row[0], -std::numeric_limits<float>::infinity());
}

TEST(LogitsProcessors, TopLogprobsAreTheMostLikelyInOrderAndRawLogprobsAreReported) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.0f};
  const auto top = top_logprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 2);
  EXPECT_NEAR(top[0].second, token_logprob(logits, 1), 1e-6);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = true;
  p.top_logprobs = 2;
  p.logit_bias = {{0, 100.0f}};
  TokenSampler s(p);
  const SampledToken t = s.sample(logits);
  EXPECT_EQ(t.token, 0);                                   // chosen with the bias ...
  EXPECT_NEAR(t.logprob, token_logprob(logits, 0), 1e-6);  // ... reported from the raw logits
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
}

TEST(LogitsProcessors, ValidateRefusesBadValues) {
  SamplingParams p;
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(p.validate(), Error);
  p.repetition_penalty = 1.0f;
  p.min_tokens = -1;
  EXPECT_THROW(p.validate(), Error);
}

}  // namespace
}  // namespace troupe::test
