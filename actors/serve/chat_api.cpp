#include "actors/serve/chat_api.hpp"

#include <nlohmann/json.hpp>

#include <atomic>

#include "actors/serve/api_request.hpp"
#include "actors/serve/completion_run.hpp"
#include "actors/serve/completion_stream.hpp"
#include "actors/serve/openai_sampling.hpp"

namespace troupe::actors {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;  // a template's tojson writes keys in the order they came

std::string next_chat_id() {
  static std::atomic<int64_t> next_id{0};
  return str_cat("chatcmpl-", next_id++);
}

// A message's content as the templates take it: a string (or null, an assistant turn that only
// calls tools). A list of parts is joined from its text parts.
ordered_json message_content(const ordered_json& content, size_t index) {
  if (content.is_null() || content.is_string()) return content;
  require(content.is_array(), "messages", "messages[", index, "].content must be a string or a list of parts");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const ordered_json& part = content[k];
    require(part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string(),
            "messages", "messages[", index, "].content[", k,
            "]: only {\"type\": \"text\", \"text\": ...} parts are supported, got ", part.dump());
    if (k > 0) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

// The conversation, checked: each message an object with a known role; contents normalized.
ordered_json read_messages(const ordered_json& j) {
  require(j.contains("messages"), "messages", "'messages' is required");
  const ordered_json& in = j.at("messages");
  require(in.is_array() && !in.empty(), "messages", "'messages' must be a non-empty list of messages");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < in.size(); ++i) {
    const ordered_json& m = in[i];
    require(m.is_object(), "messages", "messages[", i, "] must be an object");
    require(m.contains("role") && m["role"].is_string(), "messages", "messages[", i, "] has no 'role'");
    const std::string role = m["role"].get<std::string>();
    require(role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool",
            "messages", "messages[", i, "].role must be system, developer, user, assistant or tool, got \"", role,
            "\"");
    ordered_json copy = m;
    copy["content"] = message_content(m.contains("content") ? m["content"] : ordered_json(nullptr), i);
    out.push_back(std::move(copy));
  }
  return out;
}

// Fields that would change the answer and are not implemented: refused unless absent or neutral.
void refuse_unsupported(const json& j) {
  auto given = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
  require(!given("tools") || j.at("tools").empty(), "tools",
          "'tools' is not supported: troupe serve does not parse tool calls from the output");
  require(!given("tool_choice") || j.at("tool_choice") == "none", "tool_choice", "'tool_choice' must be \"none\"");
  require(!given("response_format") || j.at("response_format").value("type", "") == "text", "response_format",
          "'response_format' other than {\"type\": \"text\"} is not supported");
  require(!flag(j, "continue_final_message"), "continue_final_message", "'continue_final_message' is not supported");
}

ChatTemplateOptions template_options(const json& j, const ordered_json& ordered) {
  ChatTemplateOptions o;
  o.add_generation_prompt = !j.contains("add_generation_prompt") || flag(j, "add_generation_prompt");
  if (j.contains("chat_template_kwargs") && !j.at("chat_template_kwargs").is_null()) {
    require(j.at("chat_template_kwargs").is_object(), "chat_template_kwargs",
            "'chat_template_kwargs' must be an object");
    o.extra = ordered.at("chat_template_kwargs");
  }
  return o;
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

// 400 naming a field chat completions do not know.
void require_chat_fields(const json& j) {
  require_known_fields(j, {"messages",
                           "model",
                           "max_tokens",
                           "max_completion_tokens",
                           "temperature",
                           "top_p",
                           "top_k",
                           "seed",
                           "stop",
                           "n",
                           "stream",
                           "stream_options",
                           "user",
                           "tools",
                           "tool_choice",
                           "logprobs",
                           "top_logprobs",
                           "frequency_penalty",
                           "presence_penalty",
                           "logit_bias",
                           "response_format",
                           "chat_template_kwargs",
                           "add_generation_prompt",
                           "continue_final_message",
                           "repetition_penalty",
                           "min_tokens",
                           "ignore_eos",
                           "stop_token_ids",
                           "best_of",
                           "service_tier",
                           "metadata",
                           "store",
                           "parallel_tool_calls"});
}

// The n requests of a call: the rendered prompt, each choice's sampling, and log-probabilities
// when asked ('logprobs': true, with 'top_logprobs' alternatives).
std::vector<GenerationRequest> choice_requests(const json& j, const OpenAiSampling& s,
                                               const std::vector<int32_t>& ids) {
  const bool logprobs = flag(j, "logprobs");
  const int top_logprobs = number<int>(j, "top_logprobs", 0, 0, 20);
  require(logprobs || top_logprobs == 0, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
  require(!(logprobs && s.stream), "logprobs", "'logprobs' with 'stream' is not supported for chat");
  std::vector<GenerationRequest> requests;
  for (int k = 0; k < s.n; ++k) {
    requests.push_back({ids, s.choice_params(k)});
    requests.back().sampling.logprobs = logprobs;
    requests.back().sampling.top_logprobs = top_logprobs;
  }
  return requests;
}

}  // namespace

ChatApi::ChatApi(InferencePool& pool, const Tokenizer& tokenizer, std::shared_ptr<const ChatTemplate> chat,
                 ChatApiOptions options)
    : pool_(pool), tokenizer_(tokenizer), chat_(std::move(chat)), options_(std::move(options)) {
  if (options_.stop_tokens.empty()) options_.stop_tokens = {tokenizer_.eod()};
}

HttpReply ChatApi::chat_completions(const std::string& body) {
  return answer_or_error([&] {
    const json j = parse_body(body);
    require_chat_fields(j);
    require(chat_ != nullptr, "messages",
            "this model has no chat template (no chat_template in its tokenizer_config.json); start troupe serve with "
            "--chat-template FILE, or use /v1/completions");
    refuse_unsupported(j);
    const ordered_json ordered = ordered_json::parse(body);  // parse_body checked it
    const ordered_json messages = read_messages(ordered);
    const std::unique_ptr<Tokenizer> tok = tokenizer_.clone();
    const OpenAiSampling s = read_openai_sampling(j, {.model_names = options_.model_names,
                                                      .default_max_tokens = 1'000'000'000,  // the sequence limit
                                                      .stop_tokens = options_.stop_tokens,
                                                      .vocab_size = tok->vocab_size(),
                                                      .max_completion_tokens = true,
                                                      .max_n = options_.max_choices});
    std::string prompt;
    try {
      prompt = chat_->render(messages, template_options(j, ordered));
    } catch (const Error& e) {
      throw ApiError(400, "messages", str_cat("the chat template refused the conversation: ", e.what()));
    }
    const std::vector<int32_t> ids = tok->encode(prompt);
    require(!ids.empty(), "messages", "the rendered conversation is empty");
    std::vector<GenerationRequest> requests = choice_requests(j, s, ids);
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
