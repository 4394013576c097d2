// The inference actor pool: a router actor in front of worker actors. Each worker owns one
// model replica (an InferenceModel and its InferenceEngine on one device) and is spawned
// detached, so one thread drives its device. A worker steps its engine while it has requests
// and takes new ones between steps: a request that arrives while others decode joins the batch
// at the next step. The router sends each request to the worker with the fewest in flight.
// The pool holds a bounded number of requests (every worker's running slots plus
// `max_queued_requests`); submit() refuses more with PoolFull instead of queueing them.
// The actors are in inference_router.hpp and inference_worker.hpp, their interfaces in
// actors/serve/protocols.hpp; a request that cannot run ends with a ServeError
// (serve_error.hpp), whose sentence the request's RequestError receives.
//
//   std::vector<InferenceReplica> replicas;   // one per device
//   InferencePool pool(std::move(replicas));
//   GenerationResult r = pool.generate({prompt_ids, params});                 // blocks
//   pool.submit({prompt_ids, params}, [](const TokenEvent& e) { ... });     // streams, on a worker thread
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "actors/monitor/monitor_options.hpp"
#include "actors/monitor/monitor_schema.hpp"
#include "actors/serve/serving_metrics.hpp"
#include "kernels/context.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::actors {

struct InferenceReplica {
  std::shared_ptr<const Context> context;  // the device (its model lives there)
  std::shared_ptr<InferenceModel> model;   // weights loaded (a tensor-parallel group's rank 0)
  // A tensor-parallel replica's ranks 1 .. T-1, each on its own device (the engine steps them
  // on threads of its own); empty for a one-device replica.
  std::vector<std::shared_ptr<InferenceModel>> other_ranks;
  EngineOptions engine;    // budgets of this replica's engine
  Detokenizer detokenize;  // for stop strings (may be null)
};

struct InferencePoolOptions {
  int64_t max_queued_requests = 256;  // waiting beyond the workers' running slots, at most
};

// submit() when the pool already holds its bound: the caller should refuse (HTTP 503).
class PoolFull : public Error {
 public:
  using Error::Error;
};

// What the pool holds now, for monitoring and tests.
struct PoolStats {
  int64_t pending = 0;         // submitted and not finished (running or queued)
  int64_t capacity = 0;        // the bound on `pending`
  int64_t free_kv_blocks = 0;  // over every worker's KV cache, as of its last step
  int64_t kv_blocks = 0;       // every worker's KV cache
  int64_t cancelled = 0;       // requests that ended cancelled, since the start
};

// A submitted request; cancel() ends it at its worker's next step (a final event with
// FinishReason::cancelled) and frees its KV blocks. Copies share the request.
class RequestTicket {
 public:
  explicit RequestTicket(std::shared_ptr<std::atomic<bool>> cancel) : cancel_(std::move(cancel)) {}
  void cancel() const { *cancel_ = true; }

 private:
  std::shared_ptr<std::atomic<bool>> cancel_;
};

// A finished request, as generate() returns it.
struct GenerationResult {
  std::vector<int32_t> tokens;                                       // generated ids
  std::vector<float> logprobs;                                       // one per token when the request asked for them
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // one per token with top_logprobs > 0
  FinishReason finish = FinishReason::none;
  size_t stop_text_bytes = 0;  // stop_string: the generated text ends there
};

// Called once when a request cannot run (its engine refused it: the message says why).
using RequestError = std::function<void(const std::string& message)>;

class InferencePool {
 public:
  explicit InferencePool(std::vector<InferenceReplica> replicas, InferencePoolOptions options = {});
  ~InferencePool();  // stops the actors (requests in flight are dropped)
  InferencePool(const InferencePool&) = delete;
  InferencePool& operator=(const InferencePool&) = delete;

  size_t workers() const;
  PoolStats stats() const;
  // vLLM's request and token counters and latency histograms (GET /metrics).
  const ServingMetrics& metrics() const;
  // Queues a request, or throws PoolFull when the pool holds its bound. `on_token` runs on the
  // worker's thread for every event; the last one has `finish` set. A request the engine
  // refuses ends with `on_error` instead.
  RequestTicket submit(GenerationRequest request, TokenCallback on_token, RequestError on_error);
  // submit() and wait: the result, or troupe::Error with the engine's reason (PoolFull at once).
  // `ticket`, when given, receives the request's ticket.
  std::future<GenerationResult> generate_async(GenerationRequest request, RequestTicket* ticket = nullptr);
  GenerationResult generate(GenerationRequest request) { return generate_async(std::move(request)).get(); }

  // Monitoring (actors/serve/serving_monitor.hpp): starts the monitor actor in the pool's actor
  // system, and the router and workers report to it from then on. Binds here: a port in use
  // throws naming it. Where it listens.
  MonitorAddresses start_monitor(const MonitorOptions& options, const MonitorHello& hello);
  // Publishes the last `serving` record and `end`, then stops the monitor (the destructor does
  // so too, as "stopped"). Nothing without a monitor.
  void end_monitor(MonitorEnd end);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
