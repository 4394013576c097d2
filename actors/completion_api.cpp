#include "actors/completion_api.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>

#include "kernels/check.hpp"

namespace troupe::actors {

namespace {

using json = nlohmann::json;

// A request the client got wrong: HTTP 400 with the message.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
void require(bool ok, const Args&... args) {
  if (!ok) throw BadRequest(str_cat(args...));
}

json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  require(j.is_object(), "the request body must be a JSON object");
  return j;
}

// A number field within [lo, hi] (default when absent or null).
template <typename T>
T number(const json& j, const char* key, T fallback, double lo, double hi) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  const json& v = j.at(key);
  if constexpr (std::is_integral_v<T>)
    require(v.is_number_integer(), "'", key, "' must be an integer");
  else
    require(v.is_number(), "'", key, "' must be a number");
  const T x = v.get<T>();
  require(double(x) >= lo && double(x) <= hi, "'", key, "' must be in [", lo, ", ", hi, "], got ", v.dump());
  return x;
}

bool flag(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return false;
  require(j.at(key).is_boolean(), "'", key, "' must be true or false");
  return j.at(key).get<bool>();
}

// A string or a list of strings, as a list.
std::vector<std::string> strings(const json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.contains(key) || j.at(key).is_null()) return out;
  const json& v = j.at(key);
  if (v.is_string()) return {v.get<std::string>()};
  require(v.is_array(), "'", key, "' must be a string or a list of strings");
  for (const json& s : v) {
    require(s.is_string(), "'", key, "' must be a string or a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

struct Completion {
  std::vector<int32_t> prompt;
  GenerationResult result;
  std::string text;  // the generated text (cut before a stop string)
};

}  // namespace

CompletionApi::CompletionApi(InferencePool& pool, const Tokenizer& tokenizer, CompletionApiOptions options)
    : pool_(pool), tokenizer_(tokenizer), options_(std::move(options)) {}

// Tokenizes every prompt, submits them all (so they batch), waits for all.
static std::vector<Completion> run_all(InferencePool& pool, const Tokenizer& tok, const std::vector<std::string>& prompts,
                                       const SamplingParams& params) {
  std::vector<Completion> out(prompts.size());
  std::vector<std::future<GenerationResult>> pending;
  for (size_t i = 0; i < prompts.size(); ++i) {
    out[i].prompt = tok.encode(prompts[i]);
    require(!out[i].prompt.empty(), "prompt ", i, " is empty (nothing to continue)");
  }
  for (const Completion& c : out) pending.push_back(pool.generate_async({c.prompt, params}));
  for (size_t i = 0; i < out.size(); ++i) {
    try {
      out[i].result = pending[i].get();
    } catch (const Error& e) {
      for (size_t k = i + 1; k < pending.size(); ++k) pending[k].wait();  // nothing left running for this call
      throw BadRequest(str_cat("prompt ", i, ": ", e.what()));
    }
    out[i].text = tok.decode(out[i].result.tokens);
    if (out[i].result.finish == FinishReason::stop_string) out[i].text.resize(out[i].result.stop_text_bytes);
  }
  return out;
}

static HttpReply guarded(const std::function<HttpReply()>& f) {
  try {
    return f();
  } catch (const BadRequest& e) {
    return {400, e.what(), "text/plain"};
  } catch (const json::exception& e) {
    return {400, str_cat("bad request: ", e.what()), "text/plain"};
  }
}

HttpReply CompletionApi::megatron(const std::string& body) {
  return guarded([&] {
    const json j = parse_body(body);
    for (const char* legacy : {"max_len", "sentences", "beam_width"})
      require(!j.contains(legacy), "'", legacy, "' is not supported (use 'prompts' and 'tokens_to_generate')");
    require(j.contains("prompts"), "'prompts' is required");
    require(j.at("prompts").is_array(), "'prompts' must be a list of strings");
    const std::vector<std::string> prompts = strings(j, "prompts");
    require(!prompts.empty() && int(prompts.size()) <= options_.max_prompts, "'prompts' must hold 1 to ",
            options_.max_prompts, " strings, got ", prompts.size());
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    SamplingParams p;
    p.max_tokens = number<int64_t>(j, "tokens_to_generate", 64, 0, 1e9);
    p.logprobs = flag(j, "logprobs");
    require(p.max_tokens > 0, "'tokens_to_generate' = 0 (scoring the prompt) is not supported");
    p.temperature = number<float>(j, "temperature", 1.0f, 0.0, 100.0);
    p.top_k = number<int>(j, "top_k", 0, 0, 1000);
    p.top_p = number<float>(j, "top_p", 0.0f, 0.0, 1.0);
    require(!(p.top_k > 0 && p.top_p > 0.0f), "'top_k' and 'top_p' cannot both be set");
    p.seed = number<uint64_t>(j, "random_seed", 1234, 0, 1.8e19);
    p.stop_tokens = {number<int32_t>(j, "stop_token", tok->eod(), 0, double(tok->vocab_size() - 1))};
    const std::vector<Completion> done = run_all(pool_, *tok, prompts, p);
    json text = json::array(), tokens = json::array(), logprobs = json::array();
    for (size_t i = 0; i < done.size(); ++i) {
      text.push_back(prompts[i] + done[i].text);
      std::vector<int32_t> all = done[i].prompt;
      all.insert(all.end(), done[i].result.tokens.begin(), done[i].result.tokens.end());
      tokens.push_back(all);
      logprobs.push_back(done[i].result.logprobs);
    }
    json out = {{"text", text}, {"tokens", tokens}};
    if (p.logprobs) out["logprobs"] = logprobs;
    return HttpReply{200, out.dump()};
  });
}

HttpReply CompletionApi::completions(const std::string& body) {
  return guarded([&] {
    const json j = parse_body(body);
    require(j.contains("prompt"), "'prompt' is required");
    const std::vector<std::string> prompts = strings(j, "prompt");
    require(!prompts.empty() && int(prompts.size()) <= options_.max_prompts, "'prompt' must hold 1 to ",
            options_.max_prompts, " strings");
    require(number<int>(j, "n", 1, 1, 1) == 1 && number<int>(j, "best_of", 1, 1, 1) == 1, "'n' must be 1");
    require(!flag(j, "stream"), "'stream' is not supported");
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    SamplingParams p;
    p.max_tokens = number<int64_t>(j, "max_tokens", 16, 1, 1e9);
    p.temperature = number<float>(j, "temperature", 1.0f, 0.0, 100.0);
    p.top_k = number<int>(j, "top_k", 0, 0, 1000000);
    p.top_p = number<float>(j, "top_p", 1.0f, 0.0, 1.0);
    if (p.top_p >= 1.0f) p.top_p = 0.0f;  // OpenAI's default 1 keeps every token: off
    require(!(p.top_k > 0 && p.top_p > 0.0f), "'top_k' and 'top_p' cannot both be set");
    p.seed = number<uint64_t>(j, "seed", 1234, 0, 1.8e19);
    p.stop_strings = strings(j, "stop");
    for (const std::string& s : p.stop_strings) require(!s.empty(), "'stop' holds an empty string");
    p.stop_tokens = {tok->eod()};
    const bool want_logprobs = j.contains("logprobs") && !j.at("logprobs").is_null() &&
                               !(j.at("logprobs").is_boolean() && !j.at("logprobs").get<bool>());
    p.logprobs = want_logprobs;
    const bool echo = flag(j, "echo");
    const std::vector<Completion> done = run_all(pool_, *tok, prompts, p);

    static std::atomic<int64_t> next_id{0};
    json choices = json::array();
    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (size_t i = 0; i < done.size(); ++i) {
      const Completion& c = done[i];
      prompt_tokens += int64_t(c.prompt.size());
      completion_tokens += int64_t(c.result.tokens.size());
      const std::string prefix = echo ? prompts[i] : "";
      json lp = nullptr;
      if (want_logprobs) {
        json toks = json::array(), offsets = json::array();
        size_t offset = prefix.size();
        for (int32_t id : c.result.tokens) {
          const std::string piece = tok->decode(std::vector<int32_t>{id});
          toks.push_back(piece);
          offsets.push_back(offset);
          offset += piece.size();
        }
        lp = {{"tokens", toks}, {"token_logprobs", c.result.logprobs}, {"text_offset", offsets}, {"top_logprobs", nullptr}};
      }
      choices.push_back({{"index", i},
                         {"text", prefix + c.text},
                         {"logprobs", lp},
                         {"finish_reason", c.result.finish == FinishReason::length ? "length" : "stop"}});
    }
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
    const json out = {{"id", str_cat("cmpl-", next_id++)},
                      {"object", "text_completion"},
                      {"created", created},
                      {"model", options_.model_name},
                      {"choices", choices},
                      {"usage",
                       {{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", completion_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens}}}};
    return HttpReply{200, out.dump()};
  });
}

HttpReply CompletionApi::health() const { return {200, R"({"status":"ok"})"}; }

std::vector<HttpRoute> CompletionApi::routes() {
  auto completions = [this](const std::string& b) { return this->completions(b); };
  return {{"PUT", "/api", [this](const std::string& b) { return megatron(b); }},
          {"POST", "/v1/completions", completions},
          {"POST", "/completions", completions},
          {"GET", "/v1/health", [this](const std::string&) { return health(); }}};
}

}  // namespace troupe::actors
