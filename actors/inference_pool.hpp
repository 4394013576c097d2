// The inference actor pool: a router actor in front of worker actors. Each worker owns one
// model replica (an InferenceModel and its InferenceEngine on one device) and is spawned
// detached, so one thread drives its device. A worker steps its engine while it has requests
// and takes new ones between steps: a request that arrives while others decode joins the batch
// at the next step. The router sends each request to the worker with the fewest in flight.
//
//   std::vector<InferenceReplica> replicas;   // one per device
//   InferencePool pool(std::move(replicas));
//   GenerationResult r = pool.generate({prompt_ids, params});                 // blocks
//   pool.submit({prompt_ids, params}, [](const TokenEvent& e) { ... });     // streams, on a worker thread
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/monitor_options.hpp"
#include "actors/monitor_schema.hpp"
#include "kernels/context.hpp"
#include "model/inference_engine.hpp"

namespace troupe::actors {

struct InferenceReplica {
  std::shared_ptr<const Context> context;     // the device (its model lives there)
  std::shared_ptr<InferenceModel> model;      // weights loaded
  EngineOptions engine;                       // budgets of this replica's engine
  Detokenizer detokenize;                     // for stop strings (may be null)
};

// A finished request, as generate() returns it.
struct GenerationResult {
  std::vector<int32_t> tokens;   // generated ids
  std::vector<float> logprobs;   // one per token when the request asked for them
  FinishReason finish = FinishReason::none;
  size_t stop_text_bytes = 0;    // stop_string: the generated text ends there
};

// Called once when a request cannot run (its engine refused it: the message says why).
using RequestError = std::function<void(const std::string& message)>;

class InferencePool {
 public:
  explicit InferencePool(std::vector<InferenceReplica> replicas);
  ~InferencePool();  // stops the actors (requests in flight are dropped)
  InferencePool(const InferencePool&) = delete;
  InferencePool& operator=(const InferencePool&) = delete;

  size_t workers() const;
  // Queues a request. `on_token` runs on the worker's thread for every event; the last one has
  // `finish` set. A request the engine refuses ends with `on_error` instead.
  void submit(GenerationRequest request, TokenCallback on_token, RequestError on_error);
  // submit() and wait: the result, or troupe::Error with the engine's reason.
  std::future<GenerationResult> generate_async(GenerationRequest request);
  GenerationResult generate(GenerationRequest request) { return generate_async(std::move(request)).get(); }

  // Monitoring (actors/serving_monitor.hpp): starts the monitor actor in the pool's actor
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
