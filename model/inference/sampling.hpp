// Choosing the next token from a row of logits, with Megatron's SamplingParams semantics:
// divide by the temperature, keep the top-k or the top-p nucleus (not both), softmax, draw.
// Greedy (argmax) when temperature is 0 or top_k is 1. Each request owns a TokenSampler
// seeded from its own seed, so its tokens do not depend on what else shares the batch.
//
//   SamplingParams p;  p.temperature = 0.7f;  p.top_p = 0.9f;  p.seed = 42;
//   p.validate();                               // throws naming the bad field
//   TokenSampler sampler(p);
//   SampledToken t = sampler.sample(logits_row.first(vocab_size));   // t.token, t.logprob
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: off; 1: greedy
  float top_p = 0.0f;        // 0: off; else keep the smallest prefix of tokens (by probability) reaching p
  uint64_t seed = 1234;
  int64_t max_tokens = 16;                  // tokens to generate at most (Megatron's tokens_to_generate)
  std::vector<int32_t> stop_tokens{};       // stop after generating one of these (it is returned)
  std::vector<std::string> stop_strings{};  // stop when the text contains one (the text ends before it)
  bool logprobs = false;                    // report log-probabilities of the generated tokens
  int top_logprobs = 0;                     // with logprobs: also the k most likely tokens at each step
  // Logits processors (OpenAI / vLLM semantics), applied in this order before temperature:
  //   repetition_penalty p (prompt + generated tokens): a logit > 0 is divided by p, else multiplied;
  //   logits[t] -= frequency_penalty * count(t) + presence_penalty * (count(t) > 0) (generated tokens);
  //   logits[t] += logit_bias[t];  stop_tokens masked while fewer than min_tokens were generated.
  float frequency_penalty = 0.0f, presence_penalty = 0.0f, repetition_penalty = 1.0f;
  std::vector<std::pair<int32_t, float>> logit_bias{};
  int64_t min_tokens = 0;

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  // Whether a logits processor above is on (the row must reach the sampler on the host).
  bool adjusts_logits() const;
  // Whether the engine may pick on the device (argmax): greedy, no processor, no top log-probs.
  bool device_greedy() const { return greedy() && !adjusts_logits() && top_logprobs == 0; }
  // Throws troupe::Error naming the field: negative temperature/top_k, top_p outside [0, 1],
  // top_k and top_p both set, negative max_tokens, an empty stop string, repetition_penalty <= 0,
  // negative min_tokens or top_logprobs.
  void validate() const;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;  // log softmax of the raw logits (before processors, temperature and filtering) at token
  std::vector<std::pair<int32_t, float>> top{};  // top_logprobs: the most likely ids and their log-probabilities
};

class TokenSampler {
 public:
  explicit TokenSampler(const SamplingParams& params);
  // logits: one row, the real vocabulary only (no padding columns). `tokens`: the sequence so far
  // (prompt, then generated from `prompt_len`), for the penalties and min_tokens.
  SampledToken sample(std::span<const float> logits, std::span<const int32_t> tokens = {}, size_t prompt_len = 0);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;   // scratch: token ids sorted by logit
  std::vector<double> probs_;    // scratch
  std::vector<float> adjusted_;  // scratch: the row after the logits processors
  std::vector<int32_t> counts_;  // scratch: generated-token counts (penalties)
  SampledToken pick(std::span<const float> logits);
};

// Applies params' logits processors to `logits` in place (see SamplingParams).
void apply_logits_processors(const SamplingParams& params, std::span<float> logits, std::span<const int32_t> tokens,
                             size_t prompt_len, std::vector<int32_t>& counts_scratch);
// The k largest log softmax(logits) entries, most likely first (ties: the lower id).
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int k);

// log softmax(logits)[token], computed in double.
float token_logprob(std::span<const float> logits, int32_t token);

// Where the earliest of `stops` begins in `text`, looking only at matches that end at or
// after byte `from` (the text already checked cannot hide a new match); npos when none.
size_t find_stop_string(std::string_view text, const std::vector<std::string>& stops, size_t from = 0);

}  // namespace troupe
