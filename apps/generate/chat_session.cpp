#include "apps/generate/chat_session.hpp"

#include "apps/generate/generate_stream.hpp"
#include "base/check.hpp"

namespace troupe::apps {

using json = nlohmann::ordered_json;

ChatSession::ChatSession(InferenceEngine& engine, const Tokenizer& tokenizer, const ChatTemplate& chat,
                         SamplingParams params, ChatSessionOptions options)
    : engine_(engine), tokenizer_(tokenizer), chat_(chat), params_(std::move(params)), options_(std::move(options)) {
  if (!options_.system.empty()) messages_.push_back({{"role", "system"}, {"content", options_.system}});
}

std::string ChatSession::answer(const std::string& user, std::FILE* out) {
  messages_.push_back({{"role", "user"}, {"content", user}});
  ChatTemplateOptions t;
  t.add_generation_prompt = true;
  if (options_.template_variables.is_object()) t.extra = options_.template_variables;
  const std::vector<int32_t> ids = tokenizer_.encode(chat_.render(messages_, t));
  OrderedStream stream(out, tokenizer_, {""}, params_.stop_strings, {});
  std::vector<int32_t> tokens;
  size_t stop_at = std::string::npos;
  engine_.add_request({ids, params_}, [&](const TokenEvent& e) {
    if (e.has_token) tokens.push_back(e.token);
    if (e.finish == FinishReason::stop_string) stop_at = e.stop_text_bytes;
    stream.on_event(0, e);
  });
  engine_.run();
  std::string text = tokenizer_.decode_skipping_special(tokens);
  if (stop_at < text.size()) text.resize(stop_at);
  messages_.push_back({{"role", "assistant"}, {"content", text}});
  return text;
}

void ChatSession::run(std::FILE* in, std::FILE* out) {
  char buffer[1 << 16];
  for (;;) {
    std::fputs("you> ", stderr);
    std::fflush(stderr);
    std::string line;
    bool got = false;
    while (std::fgets(buffer, sizeof buffer, in) != nullptr) {
      got = true;
      line += buffer;
      if (!line.empty() && line.back() == '\n') break;
    }
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (!got || line.empty()) return;
    std::fputs("assistant> ", stderr);
    std::fflush(stderr);
    answer(line, out);
  }
}

}  // namespace troupe::apps
