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

// The choices of a non-streaming answer, one per prompt (with `echo`, the prompt before the
// text; with `logprobs`, OpenAI's legacy per-token object).
json completion_choices(const std::vector<Completion>& done, const std::vector<std::string>& prompts,
                        const Tokenizer& tok, bool echo, bool want_logprobs) {
  json choices = json::array();
  const size_t n = done.size() / prompts.size();  // choices per prompt
  for (size_t i = 0; i < done.size(); ++i) {
    const Completion& c = done[i];
    const std::string prefix = echo ? prompts[i / n] : "";
    json lp = nullptr;
    if (want_logprobs) {
      json toks = json::array(), offsets = json::array();
      size_t offset = prefix.size();
      for (int32_t id : c.result.tokens) {
        const std::string piece = tok.decode(std::vector<int32_t>{id});
        toks.push_back(piece);
        offsets.push_back(offset);
        offset += piece.size();
      }
      lp = {
          {"tokens", toks}, {"token_logprobs", c.result.logprobs}, {"text_offset", offsets}, {"top_logprobs", nullptr}};
    }
    choices.push_back({{"index", i},
                       {"text", prefix + c.text},
                       {"logprobs", lp},
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
    require_known_fields(j, {"prompt", "max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "logprobs",
                             "echo", "n", "best_of", "stream", "stream_options", "model", "user"});
    require(j.contains("prompt"), "prompt", "'prompt' is required");
    const std::vector<std::string> prompts = strings(j, "prompt");
    require(!prompts.empty() && int(prompts.size()) <= options_.max_prompts, "prompt", "'prompt' must hold 1 to ",
            options_.max_prompts, " strings");
    require(number<int>(j, "best_of", 1, 1, 1) == 1, "best_of", "'best_of' must be 1");
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    const OpenAiSampling s = read_openai_sampling(
        j, {.model_name = options_.model_name, .default_max_tokens = 16, .stop_tokens = options_.stop_tokens});
    require(int(prompts.size()) * s.n <= options_.max_prompts, "n", "prompts times 'n' must be at most ",
            options_.max_prompts, ", got ", prompts.size() * size_t(s.n));
    const bool want_logprobs = j.contains("logprobs") && !j.at("logprobs").is_null() &&
                               !(j.at("logprobs").is_boolean() && !j.at("logprobs").get<bool>());
    const bool echo = flag(j, "echo");
    require(!(echo && s.stream), "echo", "'echo' cannot be used with 'stream'");
    std::vector<GenerationRequest> requests;  // prompt-major: choice i * n + k is prompt i's k-th
    for (std::vector<int32_t>& ids : encode_all(*tok, prompts, "prompt"))
      for (int k = 0; k < s.n; ++k) {
        requests.push_back({ids, s.choice_params(k)});
        requests.back().sampling.logprobs = want_logprobs;
      }
    if (s.stream)
      return stream_completions(pool_, tokenizer_.clone(),
                                {.choices = std::move(requests),
                                 .shape = StreamShape::completion,
                                 .include_usage = s.include_usage,
                                 .id = next_completion_id(),
                                 .model = options_.model_name,
                                 .created = unix_seconds()});
    const std::vector<Completion> done = run_all(pool_, *tok, requests, "prompt");
    const json out = {{"id", next_completion_id()},
                      {"object", "text_completion"},
                      {"created", unix_seconds()},
                      {"model", options_.model_name},
                      {"choices", completion_choices(done, prompts, *tok, echo, want_logprobs)},
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
  const json model = {{"id", options_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "troupe"}};
  return {200, json{{"object", "list"}, {"data", json::array({model})}}.dump()};
}

std::vector<HttpRoute> CompletionApi::routes() {
  auto completions = [this](const std::string& b) { return this->completions(b); };
  auto health = [this](const std::string&) { return this->health(); };
  return {{"PUT", "/api", [this](const std::string& b) { return megatron(b); }},
          {"POST", "/v1/completions", completions},
          {"POST", "/completions", completions},
          {"GET", "/v1/models", [this](const std::string&) { return models(); }},
          {"GET", "/health", health},
          {"GET", "/v1/health", health}};
}

}  // namespace troupe::actors
