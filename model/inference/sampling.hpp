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

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  // Throws troupe::Error naming the field: negative temperature/top_k, top_p outside [0, 1],
  // top_k and top_p both set, negative max_tokens, an empty stop string.
  void validate() const;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;  // log softmax of the raw logits (before temperature and filtering) at token
};

class TokenSampler {
 public:
  explicit TokenSampler(const SamplingParams& params);
  // logits: one row, the real vocabulary only (no padding columns).
  SampledToken sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch: token ids sorted by logit
  std::vector<double> probs_;   // scratch
};

// log softmax(logits)[token], computed in double.
float token_logprob(std::span<const float> logits, int32_t token);

// Where the earliest of `stops` begins in `text`, looking only at matches that end at or
// after byte `from` (the text already checked cannot hide a new match); npos when none.
size_t find_stop_string(std::string_view text, const std::vector<std::string>& stops, size_t from = 0);

}  // namespace troupe
