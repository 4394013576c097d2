// The sampling fields OpenAI's completions and chat completions share, read once for both:
// max_tokens (chat also max_completion_tokens), temperature, top_p, top_k (vLLM's extra), seed,
// stop, n, best_of, stream, stream_options, model, frequency_penalty, presence_penalty,
// logit_bias, and vLLM's repetition_penalty, min_tokens, ignore_eos and stop_token_ids. Each
// check names its field (ApiError: 400, or 404 for an unknown model).
//
//   const OpenAiSampling s = read_openai_sampling(j, {.model_names = {"troupe"}, .default_max_tokens = 16,
//                                                     .stop_tokens = {eod}, .vocab_size = 50257});
//   s.choice_params(k)   // choice k of n: the same settings, seed + k
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/inference/sampling.hpp"

namespace troupe::actors {

struct OpenAiSamplingRules {
  std::vector<std::string> model_names = {"troupe"};  // "model" must be one of these when given
  int64_t default_max_tokens = 16;                    // completions: 16; chat: until the sequence limit
  std::vector<int32_t> stop_tokens;                   // the model's end-of-sequence ids (ignore_eos drops them)
  int64_t vocab_size = 0;                             // token ids (logit_bias, stop_token_ids) are below it
  bool max_completion_tokens = false;                 // chat: also accept max_completion_tokens
  int max_n = 16;
};

struct OpenAiSampling {
  SamplingParams params;  // choice 0's
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string model;           // the answer's "model": the one asked for, else the first served name
  // Choice k's parameters: every choice draws from its own generator (seed + k).
  SamplingParams choice_params(int k) const;
};

OpenAiSampling read_openai_sampling(const nlohmann::json& j, const OpenAiSamplingRules& rules);

// Fields OpenAI clients send that change nothing here (user, service_tier, metadata, store,
// parallel_tool_calls): checked for their JSON type only.
void accept_neutral_fields(const nlohmann::json& j);

}  // namespace troupe::actors
