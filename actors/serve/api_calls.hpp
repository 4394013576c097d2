// The JSON request bodies of `troupe serve`'s text-generation routes read into what the pool
// runs: every field checked (ApiError naming it: 400, 404 for an unknown model) before anything
// is submitted. The handlers (completion_api.hpp, chat_api.hpp) run what these return; the
// fuzz target fuzz/api_body_fuzz.cpp calls them directly, with no server and no model.
//
//   const CompletionCall call = read_completion_call(body, tokenizer, options);   // throws ApiError
//   for (const GenerationRequest& r : call.choices) pool.submit(r, ...);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/serve/chat_api.hpp"
#include "actors/serve/completion_api.hpp"
#include "actors/serve/openai_sampling.hpp"
#include "data/chat/chat_template.hpp"
#include "data/tokenizer.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::actors {

// PUT /api (Megatron's): one request per prompt.
struct MegatronCall {
  std::vector<std::string> prompts;         // as sent (the answer's text starts with each)
  std::vector<GenerationRequest> requests;  // one per prompt, the same sampling
  bool logprobs = false;
};
MegatronCall read_megatron_call(const std::string& body, const Tokenizer& tok, const CompletionApiOptions& options);

// One prompt of /v1/completions: sent as text or as token ids.
struct CompletionPrompt {
  std::vector<int32_t> ids;
  std::string text;  // as sent, or the ids decoded (echo)
};

// POST /v1/completions: n choices per prompt.
struct CompletionCall {
  std::vector<CompletionPrompt> prompts;
  OpenAiSampling sampling;
  int logprobs = -1;  // k alternatives with each token (0: the chosen token's only); -1 off
  bool echo = false;
  std::vector<GenerationRequest> choices;  // prompt-major: choice i * n + k is prompt i's k-th
};
CompletionCall read_completion_call(const std::string& body, const Tokenizer& tok, const CompletionApiOptions& options);

// POST /v1/chat/completions: the conversation rendered with `chat` (null: refused, the model has
// no chat template), n choices of it.
struct ChatCall {
  OpenAiSampling sampling;
  std::vector<GenerationRequest> choices;
};
ChatCall read_chat_call(const std::string& body, const Tokenizer& tok, const ChatTemplate* chat,
                        const ChatApiOptions& options);

}  // namespace troupe::actors
