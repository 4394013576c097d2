#include "actors/serve/inference_pool.hpp"

#include <caf/all.hpp>

#include "actors/serve/inference_router.hpp"
#include "actors/serve/inference_worker.hpp"
#include "actors/serve/pool_request.hpp"
#include "actors/serve/protocols.hpp"
#include "actors/serve/serve_error.hpp"
#include "actors/serve/serving_monitor.hpp"
#include "base/check.hpp"

namespace troupe::actors {

struct InferencePool::Impl {
  int64_t capacity = 0;
  int64_t kv_blocks = 0;
  std::atomic<int64_t> pending{0};
  std::atomic<int64_t> cancelled{0};
  std::unique_ptr<std::atomic<int64_t>[]> free_blocks;  // per worker
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  inference_router_actor router;
  std::vector<inference_worker_actor> workers;
  std::unique_ptr<ServingMonitor> monitor;
  ServingMetrics metrics;  // GET /metrics
};

InferencePool::InferencePool(std::vector<InferenceReplica> replicas, InferencePoolOptions options)
    : impl_(std::make_unique<Impl>()) {
  TROUPE_CHECK(!replicas.empty(), "InferencePool: needs at least one replica");
  TROUPE_CHECK(options.max_queued_requests >= 0, "InferencePool: max_queued_requests must be >= 0, got ",
               options.max_queued_requests);
  impl_->capacity = options.max_queued_requests;
  impl_->free_blocks = std::make_unique<std::atomic<int64_t>[]>(replicas.size());
  for (const InferenceReplica& r : replicas) {
    TROUPE_CHECK(r.model, "InferencePool: a replica has no model");
    const int64_t running = r.engine.max_sequences > 0 ? r.engine.max_sequences : r.model->options().max_sequences;
    impl_->capacity += running;
    impl_->kv_blocks += r.engine.num_blocks;
  }
  add_serve_error_category(impl_->cfg);
  impl_->system = std::make_unique<caf::actor_system>(impl_->cfg);
  impl_->router = spawn_inference_router(*impl_->system);
  for (size_t i = 0; i < replicas.size(); ++i) {
    TROUPE_CHECK(replicas[i].context && replicas[i].model, "InferencePool: replica ", i, " has no model");
    impl_->workers.push_back(
        spawn_inference_worker(*impl_->system, std::move(replicas[i]), int(i), impl_->router, &impl_->free_blocks[i]));
  }
  caf::anon_send(impl_->router, workers_atom::value, impl_->workers);
}

InferencePool::~InferencePool() {
  impl_->monitor.reset();  // publishes the end; its actors exit before the system waits for them
  for (const inference_worker_actor& w : impl_->workers) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->router, caf::exit_reason::user_shutdown);
  impl_->workers.clear();
  impl_->router = nullptr;
  impl_->system.reset();  // waits for the actors
}

size_t InferencePool::workers() const { return impl_->workers.size(); }

const ServingMetrics& InferencePool::metrics() const { return impl_->metrics; }

PoolStats InferencePool::stats() const {
  PoolStats s{.pending = impl_->pending,
              .capacity = impl_->capacity,
              .kv_blocks = impl_->kv_blocks,
              .cancelled = impl_->cancelled};
  for (size_t i = 0; i < impl_->workers.size(); ++i) s.free_kv_blocks += impl_->free_blocks[i];
  return s;
}

RequestTicket InferencePool::submit(GenerationRequest request, TokenCallback on_token, RequestError on_error) {
  std::atomic<int64_t>& pending = impl_->pending;
  for (int64_t n = pending;;) {
    if (n >= impl_->capacity)
      throw PoolFull(str_cat("the server holds its limit of ", impl_->capacity,
                             " requests (running and queued; --max-queued-requests): try again later"));
    if (pending.compare_exchange_weak(n, n + 1)) break;
  }
  // The pool's count drops before the caller hears of the end, so it may submit again at once.
  const int64_t prompt_tokens = int64_t(request.prompt.size());
  std::shared_ptr<RequestProgress> progress = impl_->metrics.on_submitted(ServingClock::now());
  auto token = [&pending, &cancelled = impl_->cancelled, &metrics = impl_->metrics, progress, prompt_tokens,
                cb = std::move(on_token)](const TokenEvent& e) {
    metrics.on_event(*progress, e, prompt_tokens, ServingClock::now());
    if (e.finish == FinishReason::cancelled) ++cancelled;
    if (e.finish != FinishReason::none) --pending;
    if (cb) cb(e);
  };
  // The actors fail a request with a ServeError; its caller gets the sentence.
  auto error = [&pending, &metrics = impl_->metrics, progress, system = impl_->system.get(),
                cb = std::move(on_error)](const caf::error& why) {
    metrics.on_failed(*progress);
    --pending;
    if (cb) cb(system->render(why));
  };
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  auto r = std::make_shared<PoolRequest>(PoolRequest{
      std::move(request), std::move(token), std::move(error), cancel, false, {.submitted = ServingClock::now()}});
  caf::anon_send(impl_->router, submit_atom::value, Submission{std::move(r)});
  return RequestTicket(std::move(cancel));
}

std::future<GenerationResult> InferencePool::generate_async(GenerationRequest request, RequestTicket* ticket) {
  auto promise = std::make_shared<std::promise<GenerationResult>>();
  auto result = std::make_shared<GenerationResult>();
  std::future<GenerationResult> f = promise->get_future();
  RequestTicket t = submit(
      std::move(request),
      [promise, result](const TokenEvent& e) {
        if (e.has_token) {
          result->tokens.push_back(e.token);
          result->logprobs.push_back(e.logprob);
          if (!e.top_logprobs.empty()) result->top_logprobs.push_back(e.top_logprobs);
        }
        if (e.finish != FinishReason::none) {
          result->finish = e.finish;
          result->stop_text_bytes = e.stop_text_bytes;
          promise->set_value(std::move(*result));
        }
      },
      [promise](const std::string& why) { promise->set_exception(std::make_exception_ptr(Error(why))); });
  if (ticket) *ticket = t;
  return f;
}

MonitorAddresses InferencePool::start_monitor(const MonitorOptions& options, const MonitorHello& hello) {
  TROUPE_CHECK(!impl_->monitor, "the pool's monitor is running already");
  impl_->monitor = std::make_unique<ServingMonitor>(*impl_->system, options, hello, int64_t(impl_->workers.size()));
  caf::anon_send(impl_->router, serving_atom::value, impl_->monitor->reporter());
  for (const inference_worker_actor& w : impl_->workers)
    caf::anon_send(w, serving_atom::value, impl_->monitor->reporter());
  return impl_->monitor->addresses();
}

void InferencePool::end_monitor(MonitorEnd end) {
  if (impl_->monitor) impl_->monitor->end(std::move(end));
}

}  // namespace troupe::actors
