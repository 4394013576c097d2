#include "actors/serve/inference_worker.hpp"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/serve/serve_error.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

class InferenceWorker : public inference_worker_actor::base {
 public:
  InferenceWorker(caf::actor_config& cfg, InferenceReplica replica, int index, worker_listener router,
                  std::atomic<int64_t>* free_blocks)
      : inference_worker_actor::base(cfg),
        replica_(std::move(replica)),
        index_(index),
        router_(std::move(router)),
        free_blocks_(free_blocks) {
    replica_.context->activate();
    engine_ = make_engine();
  }

  behavior_type make_behavior() override {
    return {
        [this](submit_atom, const Submission& s) {
          if (broken_) {  // routed here before the router heard of the retirement
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
            if (s.r->on_error) s.r->on_error(make_serve_error(ServeError::rejected, e.what()));
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
        [this](serving_atom, serving_reporter_actor reporter) { reporter_ = std::move(reporter); },
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
    const std::string sentence = str_cat("inference worker ", index_, ": ", why);
    if (replica_.other_ranks.empty()) {
      engine_ = make_engine();
    } else {  // the router hears of it before any caller does (and submits again)
      broken_ = make_serve_error(ServeError::out_of_service,
                                 str_cat(sentence, " (this tensor-parallel replica is out of service)"));
      engine_.reset();
      *free_blocks_ = 0;
      send(router_, retired_atom::value, index_, broken_);
    }
    const caf::error error = make_serve_error(ServeError::worker_failed, sentence);
    for (auto& [id, r] : pending_) {
      send(router_, finished_atom::value, index_);
      stats_.on_failed();
      if (r->on_error) r->on_error(error);
    }
    pending_.clear();
  }

  InferenceReplica replica_;
  int index_;
  worker_listener router_;
  std::atomic<int64_t>* free_blocks_;                        // the pool's view of this worker's free KV blocks
  std::unique_ptr<InferenceEngine> engine_;                  // null once retired
  caf::error broken_;                                        // why it retired; no error while in service
  std::map<int64_t, std::shared_ptr<PoolRequest>> pending_;  // engine id -> request
  bool stepping_ = false;
  serving_reporter_actor reporter_;  // the serving monitor's reporter; null: not monitored
  WorkerServingStats stats_;
};

}  // namespace

inference_worker_actor spawn_inference_worker(caf::actor_system& system, InferenceReplica replica, int index,
                                              worker_listener router, std::atomic<int64_t>* free_blocks,
                                              ActorThread thread) {
  if (thread == ActorThread::scheduled)
    return system.spawn<InferenceWorker>(std::move(replica), index, std::move(router), free_blocks);
  // Detached: its engine steps block the thread, and the device stays with one thread.
  return system.spawn<InferenceWorker, caf::detached>(std::move(replica), index, std::move(router), free_blocks);
}

}  // namespace troupe::actors
