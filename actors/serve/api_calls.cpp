#include "actors/serve/api_calls.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "actors/serve/api_request.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;  // a template's tojson writes keys in the order they came

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

// 'prompt': a string, a list of token ids, or a list of those.
std::vector<CompletionPrompt> read_prompts(const json& j, const Tokenizer& tok, int max_prompts) {
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
  std::vector<CompletionPrompt> out;
  for (size_t i = 0; i < items.size(); ++i) {
    CompletionPrompt p;
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

// The n requests of a chat call: the rendered prompt, each choice's sampling, and
// log-probabilities when asked ('logprobs': true, with 'top_logprobs' alternatives).
std::vector<GenerationRequest> chat_choices(const json& j, const OpenAiSampling& s, const std::vector<int32_t>& ids) {
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

MegatronCall read_megatron_call(const std::string& body, const Tokenizer& tok, const CompletionApiOptions& options) {
  const json j = parse_body(body);
  for (const char* legacy : {"max_len", "sentences", "beam_width"})
    require(!j.contains(legacy), legacy, "'", legacy, "' is not supported (use 'prompts' and 'tokens_to_generate')");
  require_known_fields(
      j, {"prompts", "tokens_to_generate", "temperature", "top_k", "top_p", "logprobs", "random_seed", "stop_token"});
  require(j.contains("prompts"), "prompts", "'prompts' is required");
  require(j.at("prompts").is_array(), "prompts", "'prompts' must be a list of strings");
  MegatronCall call;
  call.prompts = strings(j, "prompts");
  require(!call.prompts.empty() && int(call.prompts.size()) <= options.max_prompts, "prompts",
          "'prompts' must hold 1 to ", options.max_prompts, " strings, got ", call.prompts.size());
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
    p.stop_tokens = {number<int32_t>(j, "stop_token", tok.eod(), 0, double(tok.vocab_size() - 1))};
  else
    p.stop_tokens = options.stop_tokens;
  call.logprobs = p.logprobs;
  for (std::vector<int32_t>& ids : encode_all(tok, call.prompts, "prompts"))
    call.requests.push_back({std::move(ids), p});
  return call;
}

CompletionCall read_completion_call(const std::string& body, const Tokenizer& tok,
                                    const CompletionApiOptions& options) {
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
  CompletionCall call;
  call.prompts = read_prompts(j, tok, options.max_prompts);
  call.sampling = read_openai_sampling(j, {.model_names = options.model_names,
                                           .default_max_tokens = 16,
                                           .stop_tokens = options.stop_tokens,
                                           .vocab_size = tok.vocab_size()});
  const OpenAiSampling& s = call.sampling;
  require(int(call.prompts.size()) * s.n <= options.max_prompts, "n", "prompts times 'n' must be at most ",
          options.max_prompts, ", got ", call.prompts.size() * size_t(s.n));
  // 'logprobs': k most likely tokens with each one (0: only the chosen token's); -1 off.
  // (A boolean, as some clients send: false off, true the chosen token's only.)
  const bool as_flag = j.contains("logprobs") && j.at("logprobs").is_boolean();
  call.logprobs = as_flag ? (flag(j, "logprobs") ? 0 : -1) : number<int>(j, "logprobs", -1, 0, 20);
  call.echo = flag(j, "echo");
  require(!(call.echo && s.stream), "echo", "'echo' cannot be used with 'stream'");
  // OpenAI's echo with logprobs also scores the prompt's tokens (evaluation harnesses rely on
  // it); the engine gives the generated tokens' only, so the pair is refused, not half-answered.
  require(!(call.echo && call.logprobs >= 0), "echo",
          "'echo' with 'logprobs' (the prompt's log probabilities) is not implemented; drop one of them");
  for (const CompletionPrompt& prompt : call.prompts)
    for (int k = 0; k < s.n; ++k) {
      call.choices.push_back({prompt.ids, s.choice_params(k)});
      call.choices.back().sampling.logprobs = call.logprobs >= 0;
      call.choices.back().sampling.top_logprobs = std::max(call.logprobs, 0);
    }
  return call;
}

ChatCall read_chat_call(const std::string& body, const Tokenizer& tok, const ChatTemplate* chat,
                        const ChatApiOptions& options) {
  const json j = parse_body(body);
  require_chat_fields(j);
  require(chat != nullptr, "messages",
          "this model has no chat template (no chat_template in its tokenizer_config.json); start troupe serve with "
          "--chat-template FILE, or use /v1/completions");
  refuse_unsupported(j);
  const ordered_json ordered = ordered_json::parse(body);  // parse_body checked it
  const ordered_json messages = read_messages(ordered);
  ChatCall call;
  call.sampling = read_openai_sampling(j, {.model_names = options.model_names,
                                           .default_max_tokens = 1'000'000'000,  // the sequence limit
                                           .stop_tokens = options.stop_tokens,
                                           .vocab_size = tok.vocab_size(),
                                           .max_completion_tokens = true,
                                           .max_n = options.max_choices});
  std::string prompt;
  try {
    prompt = chat->render(messages, template_options(j, ordered));
  } catch (const Error& e) {
    throw ApiError(400, "messages", str_cat("the chat template refused the conversation: ", e.what()));
  }
  const std::vector<int32_t> ids = tok.encode(prompt);
  require(!ids.empty(), "messages", "the rendered conversation is empty");
  call.choices = chat_choices(j, call.sampling, ids);
  return call;
}

}  // namespace troupe::actors
