#include "actors/serve/completion_api.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <future>

#include "actors/serve/api_request.hpp"
#include "actors/serve/completion_stream.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

using json = nlohmann::json;

struct Completion {
  std::vector<int32_t> prompt;
  GenerationResult result;
  std::string text;  // the generated text (cut before a stop string)
};

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

// Submits every prompt (so they batch) and waits for all. A full pool (PoolFull) or a prompt
// the engine refuses (400) cancels the others.
std::vector<Completion> run_all(InferencePool& pool, const Tokenizer& tok, const std::vector<std::vector<int32_t>>& ids,
                                const SamplingParams& params, const char* field) {
  std::vector<Completion> out(ids.size());
  std::vector<std::future<GenerationResult>> pending;
  std::vector<RequestTicket> tickets;
  auto cancel_all = [&] {
    for (const RequestTicket& t : tickets) t.cancel();
    for (auto& f : pending)
      if (f.valid()) f.wait();  // nothing left running for this call
  };
  try {
    for (const std::vector<int32_t>& p : ids) {
      RequestTicket t(nullptr);
      pending.push_back(pool.generate_async({p, params}, &t));
      tickets.push_back(t);
    }
  } catch (const PoolFull&) {
    cancel_all();
    throw;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].prompt = ids[i];
    try {
      out[i].result = pending[i].get();
    } catch (const Error& e) {
      cancel_all();
      throw ApiError(400, field, str_cat("prompt ", i, ": ", e.what()));
    }
    out[i].text = tok.decode_skipping_special(out[i].result.tokens);
    if (out[i].result.finish == FinishReason::stop_string) out[i].text.resize(out[i].result.stop_text_bytes);
  }
  return out;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
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
  for (size_t i = 0; i < done.size(); ++i) {
    const Completion& c = done[i];
    const std::string prefix = echo ? prompts[i] : "";
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
                       {"finish_reason", c.result.finish == FinishReason::length ? "length" : "stop"}});
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
    const std::vector<Completion> done = run_all(pool_, *tok, encode_all(*tok, prompts, "prompts"), p, "prompts");
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
    require(number<int>(j, "n", 1, 1, 1) == 1, "n", "'n' must be 1");
    require(number<int>(j, "best_of", 1, 1, 1) == 1, "best_of", "'best_of' must be 1");
    if (j.contains("model") && !j.at("model").is_null())
      require(j.at("model") == options_.model_name, "model", "'model' must be \"", options_.model_name,
              "\" (GET /v1/models), got ", j.at("model").dump());
    const bool stream = flag(j, "stream");
    bool include_usage = false;
    if (j.contains("stream_options") && !j.at("stream_options").is_null()) {
      const json& so = j.at("stream_options");
      require(stream && so.is_object(), "stream_options", "'stream_options' must be an object, with 'stream': true");
      require_known_fields(so, {"include_usage"});
      include_usage = flag(so, "include_usage");
    }
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    SamplingParams p;
    p.max_tokens = number<int64_t>(j, "max_tokens", 16, 1, 1e9);
    p.temperature = number<float>(j, "temperature", 1.0f, 0.0, 100.0);
    p.top_k = number<int>(j, "top_k", 0, 0, 1000000);
    p.top_p = number<float>(j, "top_p", 1.0f, 0.0, 1.0);
    if (p.top_p >= 1.0f) p.top_p = 0.0f;  // OpenAI's default 1 keeps every token: off
    require(!(p.top_k > 0 && p.top_p > 0.0f), "top_p", "'top_k' and 'top_p' cannot both be set");
    p.seed = number<uint64_t>(j, "seed", 1234, 0, 1.8e19);
    p.stop_strings = strings(j, "stop");
    for (const std::string& s : p.stop_strings) require(!s.empty(), "stop", "'stop' holds an empty string");
    p.stop_tokens = options_.stop_tokens;
    const bool want_logprobs = j.contains("logprobs") && !j.at("logprobs").is_null() &&
                               !(j.at("logprobs").is_boolean() && !j.at("logprobs").get<bool>());
    p.logprobs = want_logprobs;
    const bool echo = flag(j, "echo");
    require(!(echo && stream), "echo", "'echo' cannot be used with 'stream'");
    std::vector<std::vector<int32_t>> ids = encode_all(*tok, prompts, "prompt");
    if (stream)
      return stream_completions(pool_, tokenizer_.clone(),
                                {.prompts = std::move(ids),
                                 .params = p,
                                 .include_usage = include_usage,
                                 .id = next_completion_id(),
                                 .model = options_.model_name,
                                 .created = unix_seconds()});
    const std::vector<Completion> done = run_all(pool_, *tok, ids, p, "prompt");

    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (const Completion& c : done) {
      prompt_tokens += int64_t(c.prompt.size());
      completion_tokens += int64_t(c.result.tokens.size());
    }
    const json choices = completion_choices(done, prompts, *tok, echo, want_logprobs);
    const json out = {{"id", next_completion_id()},
                      {"object", "text_completion"},
                      {"created", unix_seconds()},
                      {"model", options_.model_name},
                      {"choices", choices},
                      {"usage",
                       {{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", completion_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens}}}};
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
