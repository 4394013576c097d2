// OpenAI's chat completions in `troupe serve`:
//   POST /v1/chat/completions  {"messages": [{"role", "content"}, ...], "max_tokens" or
//                              "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
//                              "stop", "n", "stream", "stream_options", "model", "user", "logprobs",
//                              "top_logprobs", the penalties and vLLM's extras (openai_sampling.hpp),
//                              vLLM's "chat_template_kwargs" (e.g. {"enable_thinking": false}) and
//                              "add_generation_prompt"}
//                              -> {"id", "object": "chat.completion", "created", "model", "choices":
//                              [{"index", "message": {"role": "assistant", "content"}, "logprobs":
//                              null or {"content": [...]}, "finish_reason"}], "usage"}; "stream": true answers with
//                              chat.completion.chunk events (actors/serve/completion_stream.hpp).
// The conversation is rendered with the model's chat template (data/chat/chat_template.hpp) and
// encoded as the template wrote it (its own special tokens, nothing added), as transformers'
// apply_chat_template and vLLM do. Generation stops at the model's end-of-sequence ids.
// Content given as a list of parts is joined from its "text" parts with "\n" (as vLLM does);
// other part types, "tools" and "response_format" are refused
// (400 naming the field) rather than ignored: the answer would not be what was asked for.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/http/http_server.hpp"
#include "actors/serve/inference_pool.hpp"
#include "data/chat/chat_template.hpp"
#include "data/tokenizer.hpp"

namespace troupe::actors {

struct ChatApiOptions {
  std::vector<std::string> model_names = {"troupe"};  // --served-model-name: a request's "model" is one
  std::vector<int32_t> stop_tokens;                   // the tokenizer's EOD and the model's eos ids
  int max_choices = 16;                               // "n" at most
};

class ChatApi {
 public:
  // `chat` null: the model has no chat template, and every call is refused saying so.
  // `tokenizer` is cloned per call; both must outlive the API.
  ChatApi(InferencePool& pool, const Tokenizer& tokenizer, std::shared_ptr<const ChatTemplate> chat,
          ChatApiOptions options);

  HttpReply chat_completions(const std::string& body);  // POST /v1/chat/completions
  // POST /v1/chat/completions and /chat/completions, for HttpServer.
  std::vector<HttpRoute> routes();

 private:
  InferencePool& pool_;
  const Tokenizer& tokenizer_;
  std::shared_ptr<const ChatTemplate> chat_;
  ChatApiOptions options_;
};

}  // namespace troupe::actors
