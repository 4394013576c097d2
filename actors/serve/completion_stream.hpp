// OpenAI's `"stream": true` for POST /v1/completions and /v1/chat/completions: server-sent
// events, one `data: {chunk}\n\n` per generated token (its text, possibly empty while a
// character or a possible stop string is incomplete), finish_reason on each choice's last
// chunk, an optional usage chunk, then `data: [DONE]\n\n`. Completion chunks carry "text";
// chat chunks ("chat.completion.chunk") a "delta": {"role": "assistant", "content": ""} first,
// then {"content": piece}, and {} with the finish_reason. A client that goes away cancels every
// request of the call, which frees their KV blocks at the workers' next step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/http/http_server.hpp"
#include "actors/serve/inference_pool.hpp"
#include "data/tokenizer.hpp"

namespace troupe::actors {

enum class StreamShape { completion, chat };

struct StreamCall {
  std::vector<GenerationRequest> choices;  // one request each (choice index = position)
  StreamShape shape = StreamShape::completion;
  bool include_usage = false;  // stream_options.include_usage
  std::string id, model;       // of every chunk
  int64_t created = 0;
};

// Submits every choice and waits for each one's first event, so a request the engine refuses
// is a 400 (ApiError) and a full pool a 503 (PoolFull) before any byte is sent; then returns
// the reply that streams the rest. `tok` detokenizes on the HTTP thread.
HttpReply stream_completions(InferencePool& pool, std::unique_ptr<Tokenizer> tok, StreamCall call);

}  // namespace troupe::actors
