#include "actors/serve/openai_sampling.hpp"

#include "actors/serve/api_request.hpp"

namespace troupe::actors {

using json = nlohmann::json;

SamplingParams OpenAiSampling::choice_params(int k) const {
  SamplingParams p = params;
  p.seed += uint64_t(k);
  return p;
}

OpenAiSampling read_openai_sampling(const json& j, const OpenAiSamplingRules& rules) {
  OpenAiSampling s;
  if (j.contains("model") && !j.at("model").is_null())
    require(j.at("model") == rules.model_name, "model", "'model' must be \"", rules.model_name,
            "\" (GET /v1/models), got ", j.at("model").dump());
  s.stream = flag(j, "stream");
  if (j.contains("stream_options") && !j.at("stream_options").is_null()) {
    const json& so = j.at("stream_options");
    require(s.stream && so.is_object(), "stream_options", "'stream_options' must be an object, with 'stream': true");
    require_known_fields(so, {"include_usage"});
    s.include_usage = flag(so, "include_usage");
  }
  s.n = number<int>(j, "n", 1, 1, rules.max_n);
  SamplingParams& p = s.params;
  p.max_tokens = number<int64_t>(j, "max_tokens", rules.default_max_tokens, 1, 1e9);
  if (rules.max_completion_tokens && j.contains("max_completion_tokens") && !j.at("max_completion_tokens").is_null()) {
    require(!j.contains("max_tokens") || j.at("max_tokens").is_null(), "max_completion_tokens",
            "give 'max_completion_tokens' or 'max_tokens', not both");
    p.max_tokens = number<int64_t>(j, "max_completion_tokens", 0, 1, 1e9);
  }
  p.temperature = number<float>(j, "temperature", 1.0f, 0.0, 100.0);
  p.top_k = number<int>(j, "top_k", 0, 0, 1000000);
  p.top_p = number<float>(j, "top_p", 1.0f, 0.0, 1.0);
  if (p.top_p >= 1.0f) p.top_p = 0.0f;  // OpenAI's default 1 keeps every token: off
  require(!(p.top_k > 0 && p.top_p > 0.0f), "top_p", "'top_k' and 'top_p' cannot both be set");
  p.seed = number<uint64_t>(j, "seed", 1234, 0, 1.8e19);
  p.stop_strings = strings(j, "stop");
  for (const std::string& stop : p.stop_strings) require(!stop.empty(), "stop", "'stop' holds an empty string");
  p.stop_tokens = rules.stop_tokens;
  return s;
}

}  // namespace troupe::actors
