// `troupe generate --chat`: a conversation in the terminal. Each line read from `in` is a user
// message; the conversation so far is rendered with the model's chat template, encoded as the
// template wrote it, and the assistant's answer streams to `out` as it is generated, then joins
// the conversation. An empty line or end of input ends the session.
//
//   ChatSession chat(engine, tokenizer, chat_template, params, {.system = "Be brief."});
//   chat.run(stdin, stdout);
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "data/chat/chat_template.hpp"
#include "data/tokenizer.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::apps {

struct ChatSessionOptions {
  std::string system;                         // a system message first, when not empty
  nlohmann::ordered_json template_variables;  // more template variables (enable_thinking, ...)
};

class ChatSession {
 public:
  ChatSession(InferenceEngine& engine, const Tokenizer& tokenizer, const ChatTemplate& chat, SamplingParams params,
              ChatSessionOptions options);
  // Reads user lines from `in` until an empty line or its end; prompts on stderr.
  void run(std::FILE* in, std::FILE* out);
  // One turn: the assistant's answer to `user` (also written to `out` as it streams).
  std::string answer(const std::string& user, std::FILE* out);
  const nlohmann::ordered_json& messages() const { return messages_; }

 private:
  InferenceEngine& engine_;
  const Tokenizer& tokenizer_;
  const ChatTemplate& chat_;
  SamplingParams params_;
  ChatSessionOptions options_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
};

}  // namespace troupe::apps
