#include "actors/serve/inference_pool.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <map>

#include "actors/serve/serving_monitor.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

using submit_atom = caf::atom_constant<caf::atom("submit")>;      // router, worker: (Submission)
using advance_atom = caf::atom_constant<caf::atom("advance")>;    // worker to itself: one engine step
using finished_atom = caf::atom_constant<caf::atom("finished")>;  // worker -> router: (int worker)
using workers_atom = caf::atom_constant<caf::atom("workers")>;    // pool -> router: (vector<actor>), once
using retired_atom = caf::atom_constant<caf::atom("retired")>;    // worker -> router: (int worker, string why)

struct PoolRequest {
  GenerationRequest request;
  TokenCallback on_token;
  RequestError on_error;
  std::shared_ptr<std::atomic<bool>> cancel;  // set by the ticket, read by the worker
  bool cancel_sent = false;                   // the worker told its engine (worker thread only)
  RequestTiming timing;                       // for the monitor
};

// Local only: a shared_ptr travels, the request is not copied.
struct Submission {
  std::shared_ptr<PoolRequest> r;
};

}  // namespace
}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::Submission)

namespace troupe::actors {

namespace {

class InferenceWorker : public caf::event_based_actor {
 public:
  InferenceWorker(caf::actor_config& cfg, InferenceReplica replica, int index, caf::actor router,
                  std::atomic<int64_t>* free_blocks)
      : caf::event_based_actor(cfg),
        replica_(std::move(replica)),
        index_(index),
        router_(std::move(router)),
        free_blocks_(free_blocks) {
    replica_.context->activate();
    engine_ = make_engine();
  }

  caf::behavior make_behavior() override {
    return {
        [this](submit_atom, const Submission& s) {
          if (!broken_.empty()) {  // routed here before the router heard of the retirement
            send(router_, finished_atom::value, index_);
            stats_.on_failed();
            if (s.r->on_error) s.r->on_error(broken_);
            return;
          }
          try {
            const int64_t id = engine_->add_request(s.r->request, [this, r = s.r](const TokenEvent& e) {
              if (reporter_) stats_.on_token(r->timing, e, int64_t(r->request.prompt.size()), ServingClock::now());
              if (r->on_token) r->on_token(e);
              if (e.finish != FinishReason::none) retire(e.request);
            });
            pending_[id] = s.r;
          } catch (const std::exception& e) {
            send(router_, finished_atom::value, index_);
            stats_.on_failed();
            if (s.r->on_error) s.r->on_error(e.what());
            return;
          }
          if (!stepping_) {
            stepping_ = true;
            send(this, advance_atom::value);
          }
        },
        [this](advance_atom) {
          replica_.context->activate();
          for (auto& [id, r] : pending_)
            if (*r->cancel && !r->cancel_sent) r->cancel_sent = engine_->cancel(id);
          bool more = false;
          if (!engine_) {
            stepping_ = false;
            return;
          }
          try {
            more = engine_->step();
            *free_blocks_ = engine_->cache().free_blocks();
          } catch (const std::exception& e) {
            fail_all(e.what());
          }
          if (reporter_ && engine_)
            if (auto report = stats_.report(index_, *engine_, !more, ServingClock::now()))
              send(reporter_, serving_atom::value, std::move(*report));
          // Submissions that arrived meanwhile are handled before the next step.
          stepping_ = more;
          if (more) send(this, advance_atom::value);
        },
        [this](serving_atom, caf::actor reporter) { reporter_ = std::move(reporter); },
    };
  }

 private:
  std::unique_ptr<InferenceEngine> make_engine() {
    std::vector<InferenceModel*> ranks{replica_.model.get()};
    for (const auto& m : replica_.other_ranks) ranks.push_back(m.get());
    auto e = std::make_unique<InferenceEngine>(std::move(ranks), replica_.engine, replica_.detokenize);
    *free_blocks_ = e->cache().free_blocks();
    return e;
  }
  void retire(int64_t id) {
    pending_.erase(id);
    send(router_, finished_atom::value, index_);
  }
  // A failed step (a device error) ends every request of this worker with the error. A
  // one-device worker starts over with an empty engine; a tensor-parallel one cannot (the failure
  // aborted its group's collectives), so it retires: the router stops sending it requests.
  void fail_all(const std::string& why) {
    const std::string error = str_cat("inference worker ", index_, ": ", why);
    if (replica_.other_ranks.empty()) {
      engine_ = make_engine();
    } else {  // the router hears of it before any caller does (and submits again)
      broken_ = str_cat(error, " (this tensor-parallel replica is out of service)");
      engine_.reset();
      *free_blocks_ = 0;
      send(router_, retired_atom::value, index_, broken_);
    }
    for (auto& [id, r] : pending_) {
      send(router_, finished_atom::value, index_);
      stats_.on_failed();
      if (r->on_error) r->on_error(error);
    }
    pending_.clear();
  }

  InferenceReplica replica_;
  int index_;
  caf::actor router_;
  std::atomic<int64_t>* free_blocks_;                        // the pool's view of this worker's free KV blocks
  std::unique_ptr<InferenceEngine> engine_;                  // null once retired
  std::string broken_;                                       // why it retired; empty while in service
  std::map<int64_t, std::shared_ptr<PoolRequest>> pending_;  // engine id -> request
  bool stepping_ = false;
  caf::actor reporter_;  // the serving monitor's reporter; null: not monitored
  WorkerServingStats stats_;
};

struct RouterState {
  std::vector<caf::actor> workers;
  std::vector<int64_t> in_flight;
  std::vector<std::string> retired;  // per worker: why it left service ("" while in service)
  std::string last_retired;          // the latest of those reasons
  caf::actor reporter;               // the serving monitor's reporter; null: not monitored
};

// The requests in flight, to the serving monitor.
void report_in_flight(caf::stateful_actor<RouterState>* self) {
  const RouterState& st = self->state;
  int64_t n = 0;
  for (int64_t x : st.in_flight) n += x;
  if (st.reporter) self->send(st.reporter, in_flight_atom::value, n);
}

caf::behavior router_fn(caf::stateful_actor<RouterState>* self) {
  return {
      [self](workers_atom, std::vector<caf::actor> workers) {
        self->state.workers = std::move(workers);
        self->state.in_flight.assign(self->state.workers.size(), 0);
        self->state.retired.assign(self->state.workers.size(), "");
      },
      [self](submit_atom, const Submission& s) {
        RouterState& st = self->state;
        size_t w = st.workers.size();  // the worker in service with the fewest in flight
        for (size_t i = 0; i < st.workers.size(); ++i)
          if (st.retired[i].empty() && (w == st.workers.size() || st.in_flight[i] < st.in_flight[w])) w = i;
        if (w == st.workers.size()) {
          if (s.r->on_error)
            s.r->on_error(str_cat("every inference replica is out of service (", st.last_retired, ")"));
          return;
        }
        ++st.in_flight[w];
        self->send(st.workers[w], submit_atom::value, s);
        report_in_flight(self);
      },
      [self](retired_atom, int worker, const std::string& why) {
        self->state.retired[size_t(worker)] = why;
        self->state.last_retired = why;
      },
      [self](finished_atom, int worker) {
        --self->state.in_flight[size_t(worker)];
        report_in_flight(self);
      },
      [self](serving_atom, caf::actor reporter) { self->state.reporter = std::move(reporter); },
  };
}

}  // namespace

struct InferencePool::Impl {
  int64_t capacity = 0;
  int64_t kv_blocks = 0;
  std::atomic<int64_t> pending{0};
  std::atomic<int64_t> cancelled{0};
  std::unique_ptr<std::atomic<int64_t>[]> free_blocks;  // per worker
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  caf::actor router;
  std::vector<caf::actor> workers;
  std::unique_ptr<ServingMonitor> monitor;
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
  impl_->system = std::make_unique<caf::actor_system>(impl_->cfg);
  impl_->router = impl_->system->spawn(router_fn);
  for (size_t i = 0; i < replicas.size(); ++i) {
    TROUPE_CHECK(replicas[i].context && replicas[i].model, "InferencePool: replica ", i, " has no model");
    impl_->workers.push_back(impl_->system->spawn<InferenceWorker, caf::detached>(
        std::move(replicas[i]), int(i), impl_->router, &impl_->free_blocks[i]));
  }
  caf::anon_send(impl_->router, workers_atom::value, impl_->workers);
}

InferencePool::~InferencePool() {
  impl_->monitor.reset();  // publishes the end; its actors exit before the system waits for them
  for (const caf::actor& w : impl_->workers) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->router, caf::exit_reason::user_shutdown);
  impl_->workers.clear();
  impl_->router = nullptr;
  impl_->system.reset();  // waits for the actors
}

size_t InferencePool::workers() const { return impl_->workers.size(); }

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
  auto token = [&pending, &cancelled = impl_->cancelled, cb = std::move(on_token)](const TokenEvent& e) {
    if (e.finish == FinishReason::cancelled) ++cancelled;
    if (e.finish != FinishReason::none) --pending;
    if (cb) cb(e);
  };
  auto error = [&pending, cb = std::move(on_error)](const std::string& why) {
    --pending;
    if (cb) cb(why);
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
  for (const caf::actor& w : impl_->workers) caf::anon_send(w, serving_atom::value, impl_->monitor->reporter());
  return impl_->monitor->addresses();
}

void InferencePool::end_monitor(MonitorEnd end) {
  if (impl_->monitor) impl_->monitor->end(std::move(end));
}

}  // namespace troupe::actors
