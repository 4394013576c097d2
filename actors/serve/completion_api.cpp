#include "actors/serve/completion_api.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <future>

#include "actors/serve/api_request.hpp"
#include "actors/serve/completion_run.hpp"
#include "actors/serve/completion_stream.hpp"
#include "actors/serve/openai_sampling.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

using json = nlohmann::json;

std::vector<std::vector<int32_t>> encode_all(const Tokenizer& tok, const std::vector<std::string>& prompts,
                                             const char* field) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    out.emplace_back();
    tok.encode_with_special_tokens_append(prompts[i], out.back());  // an HF tokenizer's BOS, as vLLM
    require(!out.back().empty(), field, "prompt ", i, " is empty (nothing to continue)");
  }
  return out;
}

std::string next_completion_id() {
  static std::atomic<int64_t> next_id{0};
  return str_cat("cmpl-", next_id++);
}

// One prompt of /v1/completions: sent as text or as token ids.
struct Prompt {
  std::vector<int32_t> ids;
  std::string text;  // as sent, or the ids decoded (echo)
};

// 'prompt': a string, a list of token ids, or a list of those.
std::vector<Prompt> read_prompts(const json& j, const Tokenizer& tok, int max_prompts) {
  require(j.contains("prompt") && !j.at("prompt").is_null(), "prompt", "'prompt' is required");
  const json& v = j.at("prompt");
  const char* shape = "'prompt' must be a string, a list of token ids, or a list of strings or of lists of token ids";
  std::vector<json> items;
  if (v.is_string() || (v.is_array() && !v.empty() && v.front().is_number()))
    items.push_back(v);
  else if (v.is_array())
    items.assign(v.begin(), v.end());
  else
    require(false, "prompt", shape);
  require(!items.empty() && int(items.size()) <= max_prompts, "prompt", "'prompt' must hold 1 to ", max_prompts,
          " prompts, got ", items.size());
  std::vector<Prompt> out;
  for (size_t i = 0; i < items.size(); ++i) {
    Prompt p;
    if (items[i].is_string()) {
      p.text = items[i].get<std::string>();
      tok.encode_with_special_tokens_append(p.text, p.ids);  // an HF tokenizer's BOS, as vLLM
    } else {
      require(items[i].is_array(), "prompt", shape);
      for (const json& id : items[i]) {
        require(id.is_number_integer(), "prompt", shape);
        const auto t = id.get<int64_t>();
        require(t >= 0 && t < tok.vocab_size(), "prompt", "prompt ", i, " holds token id ", t,
                ", outside the vocabulary [0, ", tok.vocab_size(), ")");
        p.ids.push_back(int32_t(t));
      }
      p.text = tok.decode(p.ids);
    }
    require(!p.ids.empty(), "prompt", "prompt ", i, " is empty (nothing to continue)");
    out.push_back(std::move(p));
  }
  return out;
}

// OpenAI's legacy per-token log-probabilities of one choice, `offset` bytes into its text.
json completion_logprobs(const Completion& c, const Tokenizer& tok, size_t offset, int top) {
  json toks = json::array(), offsets = json::array(), tops = json::array();
  for (size_t t = 0; t < c.result.tokens.size(); ++t) {
    const std::string piece = tok.decode(std::vector<int32_t>{c.result.tokens[t]});
    toks.push_back(piece);
    offsets.push_back(offset);
    offset += piece.size();
    json alternatives = json::object();
    if (top > 0 && t < c.result.top_logprobs.size())
      for (const auto& [id, lp] : c.result.top_logprobs[t]) alternatives[tok.decode(std::vector<int32_t>{id})] = lp;
    tops.push_back(alternatives);
  }
  return {{"tokens", toks},
          {"token_logprobs", c.result.logprobs},
          {"text_offset", offsets},
          {"top_logprobs", top > 0 ? tops : json(nullptr)}};
}

// The choices of a non-streaming answer, n per prompt (with `echo`, the prompt before the
// text; with `logprobs`, OpenAI's legacy per-token object).
json completion_choices(const std::vector<Completion>& done, const std::vector<Prompt>& prompts, const Tokenizer& tok,
                        bool echo, int logprobs) {
  json choices = json::array();
  const size_t n = done.size() / prompts.size();  // choices per prompt
  for (size_t i = 0; i < done.size(); ++i) {
    const Completion& c = done[i];
    const std::string prefix = echo ? prompts[i / n].text : "";
    choices.push_back(
        {{"index", i},
         {"text", prefix + c.text},
         {"logprobs", logprobs >= 0 ? completion_logprobs(c, tok, prefix.size(), logprobs) : json(nullptr)},
         {"finish_reason", finish_reason_json(c.result.finish)}});
  }
  return choices;
}

}  // namespace

CompletionApi::CompletionApi(InferencePool& pool, const Tokenizer& tokenizer, CompletionApiOptions options)
    : pool_(pool), tokenizer_(tokenizer), options_(std::move(options)) {
  if (options_.stop_tokens.empty()) options_.stop_tokens = {tokenizer_.eod()};
}

HttpReply CompletionApi::megatron(const std::string& body) {
  return answer_or_error([&] {
    const json j = parse_body(body);
    for (const char* legacy : {"max_len", "sentences", "beam_width"})
      require(!j.contains(legacy), legacy, "'", legacy, "' is not supported (use 'prompts' and 'tokens_to_generate')");
    require_known_fields(
        j, {"prompts", "tokens_to_generate", "temperature", "top_k", "top_p", "logprobs", "random_seed", "stop_token"});
    require(j.contains("prompts"), "prompts", "'prompts' is required");
    require(j.at("prompts").is_array(), "prompts", "'prompts' must be a list of strings");
    const std::vector<std::string> prompts = strings(j, "prompts");
    require(!prompts.empty() && int(prompts.size()) <= options_.max_prompts, "prompts", "'prompts' must hold 1 to ",
            options_.max_prompts, " strings, got ", prompts.size());
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    SamplingParams p;
    p.max_tokens = number<int64_t>(j, "tokens_to_generate", 64, 0, 1e9);
    p.logprobs = flag(j, "logprobs");
    require(p.max_tokens > 0, "tokens_to_generate", "'tokens_to_generate' = 0 (scoring the prompt) is not supported");
    p.temperature = number<float>(j, "temperature", 1.0f, 0.0, 100.0);
    p.top_k = number<int>(j, "top_k", 0, 0, 1000);
    p.top_p = number<float>(j, "top_p", 0.0f, 0.0, 1.0);
    require(!(p.top_k > 0 && p.top_p > 0.0f), "top_p", "'top_k' and 'top_p' cannot both be set");
    p.seed = number<uint64_t>(j, "random_seed", 1234, 0, 1.8e19);
    if (j.contains("stop_token"))
      p.stop_tokens = {number<int32_t>(j, "stop_token", tok->eod(), 0, double(tok->vocab_size() - 1))};
    else
      p.stop_tokens = options_.stop_tokens;
    std::vector<GenerationRequest> requests;
    for (std::vector<int32_t>& ids : encode_all(*tok, prompts, "prompts")) requests.push_back({std::move(ids), p});
    const std::vector<Completion> done = run_all(pool_, *tok, requests, "prompts");
    json text = json::array(), tokens = json::array(), logprobs = json::array();
    for (size_t i = 0; i < done.size(); ++i) {
      text.push_back(prompts[i] + tok->decode(done[i].result.tokens));  // Megatron's: special tokens as text
      std::vector<int32_t> all = done[i].prompt;
      all.insert(all.end(), done[i].result.tokens.begin(), done[i].result.tokens.end());
      tokens.push_back(all);
      logprobs.push_back(done[i].result.logprobs);
    }
    json out = {{"text", text}, {"tokens", tokens}};
    if (p.logprobs) out["logprobs"] = logprobs;
    return HttpReply{200, dump_json(out)};
  });
}

HttpReply CompletionApi::completions(const std::string& body) {
  return answer_or_error([&] {
    const json j = parse_body(body);
    require_known_fields(j, {"prompt",
                             "max_tokens",
                             "temperature",
                             "top_k",
                             "top_p",
                             "seed",
                             "stop",
                             "logprobs",
                             "echo",
                             "n",
                             "best_of",
                             "stream",
                             "stream_options",
                             "model",
                             "user",
                             "suffix",
                             "frequency_penalty",
                             "presence_penalty",
                             "repetition_penalty",
                             "logit_bias",
                             "min_tokens",
                             "ignore_eos",
                             "stop_token_ids",
                             "service_tier",
                             "metadata",
                             "store"});
    require(!j.contains("suffix") || j.at("suffix").is_null() || j.at("suffix") == "", "suffix",
            "'suffix' (insertion) is not supported: leave it out");
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    const std::vector<Prompt> prompts = read_prompts(j, *tok, options_.max_prompts);
    const OpenAiSampling s = read_openai_sampling(j, {.model_names = options_.model_names,
                                                      .default_max_tokens = 16,
                                                      .stop_tokens = options_.stop_tokens,
                                                      .vocab_size = tok->vocab_size()});
    require(int(prompts.size()) * s.n <= options_.max_prompts, "n", "prompts times 'n' must be at most ",
            options_.max_prompts, ", got ", prompts.size() * size_t(s.n));
    // 'logprobs': k most likely tokens with each one (0: only the chosen token's); -1 off.
    // (A boolean, as some clients send: false off, true the chosen token's only.)
    const bool as_flag = j.contains("logprobs") && j.at("logprobs").is_boolean();
    const int logprobs = as_flag ? (flag(j, "logprobs") ? 0 : -1) : number<int>(j, "logprobs", -1, 0, 20);
    const bool echo = flag(j, "echo");
    require(!(echo && s.stream), "echo", "'echo' cannot be used with 'stream'");
    std::vector<GenerationRequest> requests;  // prompt-major: choice i * n + k is prompt i's k-th
    for (const Prompt& prompt : prompts)
      for (int k = 0; k < s.n; ++k) {
        requests.push_back({prompt.ids, s.choice_params(k)});
        requests.back().sampling.logprobs = logprobs >= 0;
        requests.back().sampling.top_logprobs = std::max(logprobs, 0);
      }
    if (s.stream)
      return stream_completions(pool_, tokenizer_.clone(),
                                {.choices = std::move(requests),
                                 .shape = StreamShape::completion,
                                 .include_usage = s.include_usage,
                                 .id = next_completion_id(),
                                 .model = s.model,
                                 .created = unix_seconds()});
    const std::vector<Completion> done = run_all(pool_, *tok, requests, "prompt");
    const json out = {{"id", next_completion_id()},
                      {"object", "text_completion"},
                      {"created", unix_seconds()},
                      {"model", s.model},
                      {"choices", completion_choices(done, prompts, *tok, echo, logprobs)},
                      {"usage", usage_json(done)}};
    return HttpReply{200, dump_json(out)};
  });
}

HttpReply CompletionApi::health() const {
  const PoolStats s = pool_.stats();
  const json out = {{"status", "ok"},
                    {"pending_requests", s.pending},
                    {"max_pending_requests", s.capacity},
                    {"free_kv_blocks", s.free_kv_blocks},
                    {"kv_blocks", s.kv_blocks}};
  return {200, out.dump()};
}

HttpReply CompletionApi::models() const {
  json data = json::array();
  for (const std::string& name : options_.model_names)
    data.push_back({{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "troupe"}, {"root", name}});
  return {200, json{{"object", "list"}, {"data", data}}.dump()};
}

HttpReply CompletionApi::metrics() const {
  return {200, pool_.metrics().prometheus(options_.model_names.front()), "text/plain; version=0.0.4; charset=utf-8"};
}

std::vector<HttpRoute> CompletionApi::routes() {
  auto completions = [this](const std::string& b) { return this->completions(b); };
  auto health = [this](const std::string&) { return this->health(); };
  return {{"PUT", "/api", [this](const std::string& b) { return megatron(b); }},
          {"POST", "/v1/completions", completions},
          {"POST", "/completions", completions},
          {"GET", "/v1/models", [this](const std::string&) { return models(); }},
          {"GET", "/metrics", [this](const std::string&) { return metrics(); }},
          {"GET", "/health", health},
          {"GET", "/v1/health", health}};
}

}  // namespace troupe::actors
