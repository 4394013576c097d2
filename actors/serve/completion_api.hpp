// The text-generation HTTP API of `troupe serve`, over an InferencePool (Megatron-LM's two
// servers; notes/megatron.md section 4):
//   PUT  /api             legacy: {"prompts": [...], "tokens_to_generate": 64, "temperature", "top_k",
//                         "top_p", "logprobs", "random_seed", "stop_token"} -> {"text": [prompt +
//                         completion, ...], "tokens": [[prompt + generated ids], ...], "logprobs"}
//   POST /v1/completions  OpenAI (also /completions): {"prompt": str | [ids] | [str | [ids]], "max_tokens": 16,
//                         "temperature", "top_k", "top_p", "seed", "stop", "logprobs": k, "echo", "n": 1, and
//                         the penalties and vLLM's extras of actors/serve/openai_sampling.hpp; docs/serve.md}
//                         -> {"id", "object": "text_completion", "created", "model", "choices":
//                         [{"index", "text", "logprobs", "finish_reason"}], "usage"}
//                         "stream": true answers with server-sent events (actors/serve/completion_stream.hpp)
//   GET  /v1/models       {"object": "list", "data": [{"id": a served model name, "object": "model", ...}, ...]}
//   GET  /metrics         Prometheus text, vLLM's metric names (actors/serve/serving_metrics.hpp)
//   GET  /health          {"status": "ok", "pending_requests", "max_pending_requests", "free_kv_blocks",
//                         "kv_blocks"} (also /v1/health)
// Every prompt of a call is submitted at once, so they batch together (and with other calls).
// A bad request (invalid JSON, an unknown or out-of-range field, a prompt the engine refuses) is
// HTTP 400 and a full pool 503, each with {"error": {"message", "type", "param", "code"}}
// naming the field (actors/serve/api_request.hpp).
#pragma once

#include <string>
#include <vector>

#include "actors/http/http_server.hpp"
#include "actors/serve/inference_pool.hpp"
#include "data/tokenizer.hpp"

namespace troupe::actors {

struct CompletionApiOptions {
  std::vector<std::string> model_names = {"troupe"};  // --served-model-name: a request's "model" is one
  int max_prompts = 128;                              // per call (Megatron's limit)
  std::vector<int32_t> stop_tokens{};  // generation ends after one (the tokenizer's EOD and the model's EOS ids)
};

class CompletionApi {
 public:
  // `tokenizer` is cloned per call (handlers run on several threads); it must outlive the API.
  CompletionApi(InferencePool& pool, const Tokenizer& tokenizer, CompletionApiOptions options = {});

  HttpReply megatron(const std::string& body);     // PUT /api
  HttpReply completions(const std::string& body);  // POST /v1/completions
  HttpReply health() const;                        // GET /health
  HttpReply models() const;                        // GET /v1/models
  HttpReply metrics() const;                       // GET /metrics (actors/serve/serving_metrics.hpp)
  // The routes above, for HttpServer.
  std::vector<HttpRoute> routes();

 private:
  InferencePool& pool_;
  const Tokenizer& tokenizer_;
  CompletionApiOptions options_;
};

}  // namespace troupe::actors
