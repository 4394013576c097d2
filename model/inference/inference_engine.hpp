// Continuous batching over the inference model (Megatron's dynamic engine, simplified):
// requests wait in a queue; every step() admits waiting requests in arrival order (their
// whole prompt as a prefill) while the step's token budget, the sequence limit and the free
// KV blocks allow, runs one forward over the mixed prefill + decode batch, samples one token
// per running request, streams it out through the request's callback, and retires finished
// requests, freeing their blocks at once. A request reserves the blocks for its prompt plus
// max_tokens when it is admitted, so running requests never wait for memory.
//
//   InferenceEngine engine(model, {.num_blocks = 1024, .block_size = 16});
//   engine.add_request({prompt_ids, params}, [](const TokenEvent& e) { ... e.token, e.finish ... });
//   while (engine.step()) {}
//
// A tensor-parallel group (model/inference/inference_model.hpp) runs as one engine: InferenceEngine over
// the ranks' models, rank 0 on the calling thread and the others on threads of the engine that
// step in lockstep with it. Each rank has a cache of its KV heads; rank 0's allocator hands out
// the block ids for all of them. Greedy picks merge the ranks' per-slice argmax on the host;
// sampling copies each rank's columns of the logits into whole rows on the host.
//
//   InferenceEngine engine({&rank0, &rank1}, {.num_blocks = 1024});   // rank r: {{r, 2}, false, comm_r}
//
// Not thread-safe: one thread (one worker actor) drives an engine; callbacks run inside step()
// and may call cancel().
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/inference/inference_model.hpp"
#include "model/inference/kv_cache.hpp"
#include "model/inference/sampling.hpp"

namespace troupe {

enum class FinishReason { none, length, stop_token, stop_string, cancelled };
const char* finish_reason_name(FinishReason r);  // "length", "stop", "stop", "cancelled"

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, at least one
  SamplingParams sampling;
};

// One generated token, or the end of a request.
struct TokenEvent {
  int64_t request = 0;
  bool has_token = false;  // false only in a final event without a token (cancelled, max_tokens 0)
  int32_t token = 0;
  float logprob = 0.0f;                                   // when the request asked for log-probs
  std::vector<std::pair<int32_t, float>> top_logprobs{};  // sampling.top_logprobs most likely (id, log-prob)
  FinishReason finish = FinishReason::none;               // set on the request's last event
  size_t stop_text_bytes = 0;                             // stop_string: the generated text ends after this many bytes
};
using TokenCallback = std::function<void(const TokenEvent&)>;
// Generated ids -> text, for stop strings (null: stop strings are an error).
using Detokenizer = std::function<std::string(std::span<const int32_t>)>;

struct EngineOptions {
  int64_t num_blocks = 0;           // KV cache blocks (required)
  int block_size = 16;              // tokens per block
  int64_t max_tokens_per_step = 0;  // 0: the model's max_tokens
  int64_t max_sequences = 0;        // running requests at most; 0: the model's max_sequences
  int64_t max_sequence_length = 0;  // prompt + generated at most; 0: the model's limit
  // Tensor-parallel groups: a step whose ranks have not all finished after this many seconds
  // aborts the group's collectives and fails, naming the late ranks (a rank that stopped
  // stepping must not leave the others waiting in NCCL for ever).
  double step_timeout_s = 120;
};

class InferenceEngine {
 public:
  InferenceEngine(InferenceModel& model, EngineOptions options, Detokenizer detokenize = nullptr);
  // ranks[r]: rank r of a tensor-parallel group (the same config, dtype and options on every
  // rank), each on its own device. A failure on one rank, or a step that runs past
  // options.step_timeout_s, aborts the group's collectives and throws from step(); the engine
  // is not usable afterwards.
  InferenceEngine(std::vector<InferenceModel*> ranks, EngineOptions options, Detokenizer detokenize = nullptr);
  ~InferenceEngine();

  // Queues a request; returns its id. Throws naming the limit when it can never run (a prompt
  // over the step budget or the sequence length, more blocks than the cache has), a prompt
  // token is outside the vocabulary, or its sampling parameters are invalid.
  int64_t add_request(GenerationRequest request, TokenCallback on_token);
  // Ends a waiting or running request at the next step (a final event with `cancelled`);
  // false when no such request is pending.
  bool cancel(int64_t request);
  // One engine step; returns whether requests remain (waiting or running).
  bool step();
  // Steps until every request has finished.
  void run();

  int64_t waiting() const { return int64_t(waiting_.size()); }
  int64_t running() const { return int64_t(running_.size()); }
  const KvCache& cache() const;  // rank 0's: the block allocator
  const EngineOptions& options() const { return options_; }

 private:
  struct Request;
  struct Rank;        // one tensor-parallel rank's model, cache and choose() buffers
  class RankThreads;  // the threads of ranks 1 .. T-1
  bool admit(Request& r, int64_t& tokens_left);
  void finish(Request& r, FinishReason reason, std::vector<TokenEvent>& events);
  // Runs the forward over `batch` (the running requests' new tokens) and picks the next token
  // of each running request from its row of logits: when every request is greedy without
  // logits processors or top log-probs (SamplingParams::device_greedy), picked on the device
  // (argmax_logprob: 2 numbers per row reach the host, not a row of logits); else the rows are
  // converted to f32 on the device, copied to pinned memory, and each request's sampler draws
  // on the host (penalties and bias applied there), the rows in parallel. Under tensor
  // parallelism each rank picks in its vocabulary slice (the host merges the picks) or copies
  // its slice's columns straight into the whole rows on the host.
  std::vector<SampledToken> choose(std::span<const SequenceInput> batch);
  // On rank r's thread: its forward, then its greedy pick or its host rows.
  void rank_step(Rank& k, std::span<const SequenceInput> batch, bool greedy);
  void accept(Request& r, const SampledToken& t, std::vector<TokenEvent>& events);
  KvCache& allocator();  // rank 0's cache: its block ids serve every rank

  std::vector<std::unique_ptr<Rank>> ranks_;
  InferenceModel& model_;  // rank 0's
  EngineOptions options_;
  Detokenizer detokenize_;
  std::unique_ptr<RankThreads> threads_;  // null for one rank
  int64_t next_id_ = 0;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  Tensor whole_rows_;  // tensor parallelism: [S, vocab] host f32 sampling rows, each rank copies its columns in
};

}  // namespace troupe
