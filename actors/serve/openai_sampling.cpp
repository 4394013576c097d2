#include "actors/serve/openai_sampling.hpp"

#include <algorithm>

#include "actors/serve/api_request.hpp"

namespace troupe::actors {

using json = nlohmann::json;

namespace {

bool given(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

int32_t token_id(const json& v, const char* field, int64_t vocab_size) {
  require(v.is_number_integer(), field, "'", field, "' holds ", v.dump(), ", not a token id");
  const auto id = v.get<int64_t>();
  require(id >= 0 && id < vocab_size, field, "'", field, "' holds token id ", id, ", outside the vocabulary [0, ",
          vocab_size, ")");
  return int32_t(id);
}

std::vector<std::pair<int32_t, float>> read_logit_bias(const json& j, int64_t vocab_size) {
  std::vector<std::pair<int32_t, float>> out;
  if (!given(j, "logit_bias")) return out;
  const json& b = j.at("logit_bias");
  require(b.is_object(), "logit_bias", "'logit_bias' must be an object of token id -> bias");
  for (const auto& [key, value] : b.items()) {
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
      id = -1;
    }
    require(id >= 0 && id < vocab_size, "logit_bias", "'logit_bias' key \"", key, "\" is not a token id in [0, ",
            vocab_size, ")");
    require(value.is_number(), "logit_bias", "'logit_bias' values must be numbers, got ", value.dump());
    const double bias = value.get<double>();
    require(bias >= -100 && bias <= 100, "logit_bias", "'logit_bias' values must be in [-100, 100], got ",
            value.dump());
    out.emplace_back(int32_t(id), float(bias));
  }
  return out;
}

}  // namespace

SamplingParams OpenAiSampling::choice_params(int k) const {
  SamplingParams p = params;
  p.seed += uint64_t(k);
  return p;
}

void accept_neutral_fields(const json& j) {
  require(!given(j, "user") || j.at("user").is_string(), "user", "'user' must be a string");
  require(!given(j, "service_tier") || j.at("service_tier").is_string(), "service_tier",
          "'service_tier' must be a string");
  require(!given(j, "metadata") || j.at("metadata").is_object(), "metadata", "'metadata' must be an object");
  flag(j, "store");
  flag(j, "parallel_tool_calls");
}

OpenAiSampling read_openai_sampling(const json& j, const OpenAiSamplingRules& rules) {
  OpenAiSampling s;
  s.model = rules.model_names.empty() ? "troupe" : rules.model_names.front();
  if (given(j, "model")) {
    const json& m = j.at("model");
    const bool known = m.is_string() && std::find(rules.model_names.begin(), rules.model_names.end(),
                                                  m.get<std::string>()) != rules.model_names.end();
    // vLLM's answer to an unknown model: 404.
    if (!known)
      throw ApiError(404, "model",
                     str_cat("The model '", m.is_string() ? m.get<std::string>() : m.dump(), "' does not exist."));
    s.model = m.get<std::string>();
  }
  accept_neutral_fields(j);
  s.stream = flag(j, "stream");
  if (given(j, "stream_options")) {
    const json& so = j.at("stream_options");
    require(s.stream && so.is_object(), "stream_options", "'stream_options' must be an object, with 'stream': true");
    require_known_fields(so, {"include_usage", "continuous_usage_stats"});
    s.include_usage = flag(so, "include_usage");
  }
  s.n = number<int>(j, "n", 1, 1, rules.max_n);
  // best_of > n would need the candidates' cumulative log-probabilities compared before
  // answering (and no streaming): refused; best_of == n is the same call.
  const int best_of = number<int>(j, "best_of", s.n, 1, rules.max_n);
  require(best_of == s.n, "best_of", "'best_of' must equal 'n' (", s.n, "): best_of > n is not supported, got ",
          best_of);
  SamplingParams& p = s.params;
  p.max_tokens = number<int64_t>(j, "max_tokens", rules.default_max_tokens, 1, 1e9);
  if (rules.max_completion_tokens && given(j, "max_completion_tokens")) {
    require(!given(j, "max_tokens"), "max_completion_tokens", "give 'max_completion_tokens' or 'max_tokens', not both");
    p.max_tokens = number<int64_t>(j, "max_completion_tokens", 0, 1, 1e9);
  }
  p.temperature = number<float>(j, "temperature", 1.0f, 0.0, 100.0);
  p.top_k = number<int>(j, "top_k", 0, -1, 1000000);
  if (p.top_k < 0) p.top_k = 0;  // vLLM's -1: off
  p.top_p = number<float>(j, "top_p", 1.0f, 0.0, 1.0);
  if (p.top_p >= 1.0f) p.top_p = 0.0f;  // OpenAI's default 1 keeps every token: off
  require(!(p.top_k > 0 && p.top_p > 0.0f), "top_p", "'top_k' and 'top_p' cannot both be set");
  p.seed = number<uint64_t>(j, "seed", 1234, 0, 1.8e19);
  p.stop_strings = strings(j, "stop");
  for (const std::string& stop : p.stop_strings) require(!stop.empty(), "stop", "'stop' holds an empty string");
  p.frequency_penalty = number<float>(j, "frequency_penalty", 0.0f, -2.0, 2.0);
  p.presence_penalty = number<float>(j, "presence_penalty", 0.0f, -2.0, 2.0);
  p.repetition_penalty = number<float>(j, "repetition_penalty", 1.0f, 0.0, 10.0);
  require(p.repetition_penalty > 0.0f, "repetition_penalty", "'repetition_penalty' must be > 0, got 0");
  p.logit_bias = read_logit_bias(j, rules.vocab_size);
  p.min_tokens = number<int64_t>(j, "min_tokens", 0, 0, double(p.max_tokens));
  if (!flag(j, "ignore_eos")) p.stop_tokens = rules.stop_tokens;
  if (given(j, "stop_token_ids")) {
    const json& ids = j.at("stop_token_ids");
    require(ids.is_array(), "stop_token_ids", "'stop_token_ids' must be a list of token ids");
    for (const json& id : ids) p.stop_tokens.push_back(token_id(id, "stop_token_ids", rules.vocab_size));
  }
  return s;
}

}  // namespace troupe::actors
