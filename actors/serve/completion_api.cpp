#include "actors/serve/completion_api.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <future>

#include "actors/serve/api_calls.hpp"
#include "actors/serve/api_request.hpp"
#include "actors/serve/completion_run.hpp"
#include "actors/serve/completion_stream.hpp"
#include "actors/serve/openai_sampling.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

using json = nlohmann::json;

std::string next_completion_id() {
  static std::atomic<int64_t> next_id{0};
  return str_cat("cmpl-", next_id++);
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
json completion_choices(const std::vector<Completion>& done, const std::vector<CompletionPrompt>& prompts,
                        const Tokenizer& tok, bool echo, int logprobs) {
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
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    const MegatronCall call = read_megatron_call(body, *tok, options_);
    const std::vector<std::string>& prompts = call.prompts;
    const std::vector<GenerationRequest>& requests = call.requests;
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
    if (call.logprobs) out["logprobs"] = logprobs;
    return HttpReply{200, dump_json(out)};
  });
}

HttpReply CompletionApi::completions(const std::string& body) {
  return answer_or_error([&] {
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    CompletionCall call = read_completion_call(body, *tok, options_);
    const OpenAiSampling& s = call.sampling;
    std::vector<GenerationRequest>& requests = call.choices;
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
                      {"choices", completion_choices(done, call.prompts, *tok, call.echo, call.logprobs)},
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
