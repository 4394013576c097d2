// The sampling fields OpenAI's completions and chat completions share, read once for both:
// max_tokens (chat also max_completion_tokens), temperature, top_p, top_k (vLLM's extra), seed,
// stop, n, stream, stream_options and model. Each check names its field (ApiError, 400).
//
//   const OpenAiSampling s = read_openai_sampling(j, {.model_name = "troupe", .default_max_tokens = 16,
//                                                     .stop_tokens = {eod}});
//   s.choice_params(k)   // choice k of n: the same settings, seed + k
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/inference/sampling.hpp"

namespace troupe::actors {

struct OpenAiSamplingRules {
  std::string model_name;              // "model" must be this when given
  int64_t default_max_tokens = 16;     // completions: 16; chat: until the sequence limit
  std::vector<int32_t> stop_tokens;    // the model's end-of-sequence ids
  bool max_completion_tokens = false;  // chat: also accept max_completion_tokens
  int max_n = 16;
};

struct OpenAiSampling {
  SamplingParams params;  // choice 0's
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Choice k's parameters: every choice draws from its own generator (seed + k).
  SamplingParams choice_params(int k) const;
};

OpenAiSampling read_openai_sampling(const nlohmann::json& j, const OpenAiSamplingRules& rules);

}  // namespace troupe::actors
