// The monitor actor's protocol (monitor_actor in actors/monitor/protocols.hpp), stepped on CAF's
// test coordinator with only its HTTP side on (no ZeroMQ, so no snapshot timer): a record is
// published (true) until the run's end, then ignored (false); a trace batch is taken out of the
// trainer's TraceQueue and shows in the metrics with its per-stage breakdown.
#include <caf/all.hpp>

#include <memory>
#include <string>

#include "actors/monitor/monitor_actor.hpp"
#include "tests/actors/coordinated_system.hpp"
#include "tests/http_client.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using actors::MonitorBody;

actors::MonitorIteration iteration_record(int64_t iteration) {
  actors::MonitorIteration it;
  it.iteration = iteration;
  it.lm_loss = 3.5;
  return it;
}

class MonitorProtocol : public ::testing::Test {
 protected:
  MonitorProtocol() {
    cs_ = std::make_unique<CoordinatedSystem>();
    actors::MonitorOptions options;
    options.metrics_port = 0;
    actors::MonitorHello hello;
    hello.run_id = "test";
    schedules::TraceHeader trace;
    trace.shape = {2, 1, 2, 1};
    spawned_ = actors::spawn_monitor(*cs_->system, options, hello, trace, actors::ActorThread::scheduled);
    cs_->sched->run();  // initialized: the hello is published
  }

  ~MonitorProtocol() override {
    caf::anon_send_exit(spawned_.monitor, caf::exit_reason::user_shutdown);
    cs_->sched->run();
    spawned_ = {};
  }

  // The monitor's answer to publishing `body`.
  bool publish(MonitorBody body) {
    caf::scoped_actor self{*cs_->system};
    auto answer = self->request(spawned_.monitor, caf::infinite, actors::publish_atom::value, std::move(body));
    cs_->sched->run();  // the monitor handles it; the answer waits in the scoped actor's mailbox
    bool published = false;
    answer.receive([&](bool b) { published = b; }, [](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    return published;
  }

  std::string metrics() const {
    const std::string url = spawned_.addresses.metrics_url;  // http://127.0.0.1:PORT/metrics
    const int port = std::stoi(url.substr(url.rfind(':') + 1));
    return http_get("127.0.0.1", port, "/metrics").body;
  }

  std::unique_ptr<CoordinatedSystem> cs_;
  actors::MonitorSpawn spawned_;
};

TEST_F(MonitorProtocol, RecordsArePublishedUntilTheRunsEnd) {
  EXPECT_TRUE(publish(iteration_record(7)));
  EXPECT_NE(metrics().find("troupe_iteration 7"), std::string::npos) << metrics();
  actors::MonitorEnd end;
  end.iteration = 7;
  end.reason = "completed";
  EXPECT_TRUE(publish(end));
  EXPECT_FALSE(publish(iteration_record(8))) << "a record after the end was published";
  EXPECT_EQ(metrics().find("troupe_iteration 8"), std::string::npos);
}

TEST_F(MonitorProtocol, ATraceBatchLeavesTheQueueAndIsPublished) {
  actors::TraceBatch batch;
  batch.iteration = 3;
  batch.end_ns = 100;
  for (int stage = 0; stage < 2; ++stage) {
    schedules::TraceEvent e;
    e.actor = str_cat("stage", stage);
    e.stage = stage;
    e.kind = schedules::EventKind::forward;
    e.iteration = 3;
    e.start_ns = 10;
    e.end_ns = 60;
    batch.events.push_back(e);
  }
  actors::TraceQueue& queue = *spawned_.trace_queue;
  ASSERT_TRUE(queue.try_push(int64_t(batch.events.size())));
  caf::anon_send(actors::monitor_trace_actor{spawned_.monitor}, actors::trace_atom::value, std::move(batch));
  cs_->sched->run();
  EXPECT_TRUE(queue.try_push(queue.capacity())) << "the monitor did not take the batch's events out of the queue";
  EXPECT_EQ(queue.dropped(), 0);
  const std::string text = metrics();
  EXPECT_NE(text.find("troupe_traced_iteration 3"), std::string::npos) << text;
  EXPECT_NE(text.find("troupe_trace_events_total 2"), std::string::npos) << text;
}

}  // namespace
}  // namespace troupe::test
