#include "actors/serve/chat_api.hpp"

#include <nlohmann/json.hpp>

#include <atomic>

#include "actors/serve/api_calls.hpp"
#include "actors/serve/api_request.hpp"
#include "actors/serve/completion_run.hpp"
#include "actors/serve/completion_stream.hpp"
#include "actors/serve/openai_sampling.hpp"

namespace troupe::actors {

namespace {

using json = nlohmann::json;

std::string next_chat_id() {
  static std::atomic<int64_t> next_id{0};
  return str_cat("chatcmpl-", next_id++);
}

// OpenAI's chat log-probabilities of one choice: {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [...]}, ...]}.
json chat_logprobs(const Completion& c, const Tokenizer& tok) {
  auto entry = [&](int32_t id, float lp) {
    const std::string piece = tok.decode(std::vector<int32_t>{id});
    json bytes = json::array();
    for (char ch : piece) bytes.push_back(int(static_cast<unsigned char>(ch)));
    return json{{"token", piece}, {"logprob", lp}, {"bytes", bytes}};
  };
  json content = json::array();
  for (size_t t = 0; t < c.result.tokens.size(); ++t) {
    json e = entry(c.result.tokens[t], t < c.result.logprobs.size() ? c.result.logprobs[t] : 0.0f);
    json tops = json::array();
    if (t < c.result.top_logprobs.size())
      for (const auto& [id, lp] : c.result.top_logprobs[t]) tops.push_back(entry(id, lp));
    e["top_logprobs"] = tops;
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

}  // namespace

ChatApi::ChatApi(InferencePool& pool, const Tokenizer& tokenizer, std::shared_ptr<const ChatTemplate> chat,
                 ChatApiOptions options)
    : pool_(pool), tokenizer_(tokenizer), chat_(std::move(chat)), options_(std::move(options)) {
  if (options_.stop_tokens.empty()) options_.stop_tokens = {tokenizer_.eod()};
}

HttpReply ChatApi::chat_completions(const std::string& body) {
  return answer_or_error([&] {
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    ChatCall call = read_chat_call(body, *tok, chat_.get(), options_);
    const OpenAiSampling& s = call.sampling;
    std::vector<GenerationRequest>& requests = call.choices;
    const bool logprobs = requests.front().sampling.logprobs;
    const std::string id = next_chat_id();
    if (s.stream)
      return stream_completions(pool_, tokenizer_.clone(),
                                {.choices = std::move(requests),
                                 .shape = StreamShape::chat,
                                 .include_usage = s.include_usage,
                                 .id = id,
                                 .model = s.model,
                                 .created = unix_seconds()});
    const std::vector<Completion> done = run_all(pool_, *tok, requests, "choice");
    json choices = json::array();
    for (size_t i = 0; i < done.size(); ++i)
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", done[i].text}}},
                         {"logprobs", logprobs ? chat_logprobs(done[i], *tok) : json(nullptr)},
                         {"finish_reason", finish_reason_json(done[i].result.finish)}});
    const json out = {{"id", id},         {"object", "chat.completion"}, {"created", unix_seconds()},
                      {"model", s.model}, {"choices", choices},          {"usage", usage_json(done)}};
    return HttpReply{200, dump_json(out)};
  });
}

std::vector<HttpRoute> ChatApi::routes() {
  auto chat = [this](const std::string& b) { return chat_completions(b); };
  return {{"POST", "/v1/chat/completions", chat}, {"POST", "/chat/completions", chat}};
}

}  // namespace troupe::actors
