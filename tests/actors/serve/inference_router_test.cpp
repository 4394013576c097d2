// The inference pool router's protocol (inference_router_actor in actors/serve/protocols.hpp),
// stepped one message at a time on CAF's test coordinator with stand-in workers: a request goes
// to the worker in service with the fewest in flight (the first of those on a tie), a request's
// end frees its worker's slot, the serving reporter hears every count, a retired worker gets no
// more requests, and with none in service the caller gets a ServeError::out_of_service that
// names why the last one left.
#include <caf/all.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/serve/inference_router.hpp"
#include "actors/serve/serve_error.hpp"
#include "tests/actors/coordinated_system.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using actors::Submission;

// What the stand-ins saw: the requests each worker was sent (by their first prompt token) and
// the counts of requests in flight the reporter was told.
struct RouterLog {
  std::vector<std::vector<int32_t>> routed;
  std::vector<int64_t> in_flight;
};

actors::inference_worker_actor::behavior_type fake_worker_fn(actors::inference_worker_actor::pointer, RouterLog* log,
                                                             int index) {
  return {
      [log, index](actors::submit_atom, const Submission& s) {
        log->routed[size_t(index)].push_back(s.r->request.prompt[0]);
      },
      [](actors::serving_atom, const actors::serving_reporter_actor&) {},
      [](actors::advance_atom) {},
  };
}

actors::serving_reporter_actor::behavior_type fake_reporter_fn(actors::serving_reporter_actor::pointer,
                                                               RouterLog* log) {
  return {
      [](actors::serving_atom, const actors::WorkerServingReport&) {},
      [log](actors::in_flight_atom, int64_t n) { log->in_flight.push_back(n); },
      [](actors::flush_atom) { return true; },
      [](actors::serving_tick_atom) {},
      [](bool) {},
  };
}

class RouterProtocol : public ::testing::Test {
 protected:
  static constexpr int kWorkers = 3;

  RouterProtocol() {
    cs_ = std::make_unique<CoordinatedSystem>(actors::add_serve_error_category);
    log_.routed.resize(kWorkers);
    router_ = actors::spawn_inference_router(*cs_->system);
    for (int i = 0; i < kWorkers; ++i) workers_.push_back(cs_->system->spawn(fake_worker_fn, &log_, i));
    reporter_ = cs_->system->spawn(fake_reporter_fn, &log_);
    caf::anon_send(router_, actors::workers_atom::value, workers_);
    caf::anon_send(router_, actors::serving_atom::value, reporter_);
    cs_->sched->run();
  }

  ~RouterProtocol() override {
    for (const auto& w : workers_) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(reporter_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
    cs_->sched->run();
    workers_.clear();
    reporter_ = nullptr;
    router_ = nullptr;
  }

  // Submits request `id` (its prompt's first token) and runs until every actor is idle.
  void submit(int32_t id) {
    auto r = std::make_shared<actors::PoolRequest>();
    r->request.prompt = {id};
    r->on_error = [this](const caf::error& e) { failure_ = e; };
    r->cancel = std::make_shared<std::atomic<bool>>(false);
    caf::anon_send(router_, actors::submit_atom::value, Submission{std::move(r)});
    cs_->sched->run();
  }

  void finished(int worker) {
    caf::anon_send(router_, actors::finished_atom::value, worker);
    cs_->sched->run();
  }

  void retire(int worker, const std::string& why) {
    caf::anon_send(router_, actors::retired_atom::value, worker,
                   actors::make_serve_error(actors::ServeError::out_of_service, why));
    cs_->sched->run();
  }

  std::unique_ptr<CoordinatedSystem> cs_;
  RouterLog log_;
  std::optional<caf::error> failure_;
  actors::inference_router_actor router_;
  std::vector<actors::inference_worker_actor> workers_;
  actors::serving_reporter_actor reporter_;
};

TEST_F(RouterProtocol, ARequestGoesToTheWorkerWithTheFewestInFlight) {
  for (int32_t id : {10, 11, 12, 13}) submit(id);  // all idle: 0, then 1, 2; all at one: 0 again
  EXPECT_EQ(log_.routed, (std::vector<std::vector<int32_t>>{{10, 13}, {11}, {12}}));
  finished(1);  // in flight: 2, 0, 1
  submit(14);
  EXPECT_EQ(log_.routed[1], (std::vector<int32_t>{11, 14}));
  finished(0);  // in flight: 1, 1, 1: the first of them
  submit(15);
  EXPECT_EQ(log_.routed[0], (std::vector<int32_t>{10, 13, 15}));
  EXPECT_EQ(log_.in_flight, (std::vector<int64_t>{1, 2, 3, 4, 3, 4, 3, 4}));
  EXPECT_FALSE(failure_.has_value());
}

TEST_F(RouterProtocol, WithNoWorkerInServiceTheCallerGetsTheServeError) {
  retire(0, "inference worker 0: the group was aborted (this tensor-parallel replica is out of service)");
  submit(20);
  submit(21);
  EXPECT_EQ(log_.routed, (std::vector<std::vector<int32_t>>{{}, {20}, {21}})) << "a retired worker got a request";
  retire(1, "inference worker 1: one");
  retire(2, "inference worker 2: two");
  const std::vector<int64_t> counts = log_.in_flight;
  submit(22);
  EXPECT_EQ(log_.routed, (std::vector<std::vector<int32_t>>{{}, {20}, {21}}));
  EXPECT_EQ(log_.in_flight, counts) << "a request no worker took was counted";
  ASSERT_TRUE(failure_.has_value());
  EXPECT_TRUE(actors::is_serve_error(*failure_, actors::ServeError::out_of_service)) << cs_->system->render(*failure_);
  EXPECT_EQ(cs_->system->render(*failure_), "every inference replica is out of service (inference worker 2: two)");
}

}  // namespace
}  // namespace troupe::test
