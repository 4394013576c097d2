#include "actors/monitor_actor.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>

#include "actors/metrics_http_server.hpp"
#include "actors/monitor_metrics.hpp"
#include "actors/monitor_publisher.hpp"
#include "kernels/check.hpp"

namespace troupe::actors {

namespace {

// To itself: look for new subscribers, re-send the snapshot when due.
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;

// How often the actor checks for new subscribers: a subscriber waits at most this long for
// its first snapshot.
constexpr std::chrono::milliseconds kPollInterval{200};
// Iteration records a new subscriber gets at once, so its loss chart starts with a history.
constexpr size_t kHistory = 64;

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What spawn_monitor prepared on the caller's thread (bound sockets), handed to the actor.
struct MonitorSetup {
  MonitorOptions options;
  MonitorHello hello;
  std::unique_ptr<MonitorPublisher> publisher;  // null without --monitor-endpoint
  std::shared_ptr<MonitorMetrics> metrics;
  std::unique_ptr<MetricsHttpServer> http;      // null without --metrics-port
};

struct MonitorState {
  // Declaration order = reverse destruction order: the HTTP server stops first (its handlers
  // read `metrics`), the socket closes last (it lingers briefly to let the `end` out).
  std::unique_ptr<MonitorPublisher> publisher;
  std::shared_ptr<MonitorMetrics> metrics;
  std::unique_ptr<MetricsHttpServer> http;
  MonitorOptions options;
  uint64_t seq = 0;
  uint64_t subscriptions = 0;
  // The latest record of each type, as first published (seq, time): the snapshot.
  std::optional<MonitorMessage> hello, iteration, validation, end;
  std::deque<MonitorMessage> history;  // the latest kHistory iteration records
  std::chrono::steady_clock::time_point last_snapshot = std::chrono::steady_clock::now();
  static inline const char* name = "monitor";
};

using MonitorActor = caf::stateful_actor<MonitorState>;

void send(MonitorState& st, const MonitorMessage& m) {
  if (!st.publisher) return;
  st.publisher->send(monitor_encode(m));
  st.metrics->set_publisher_counts(st.publisher->sent(), st.publisher->refused(), st.subscriptions);
}

void send_repeat(MonitorState& st, MonitorMessage m) {
  m.repeat = true;
  send(st, m);
}

// The run's state for subscribers that attached late: the hello, the latest records (with
// `history`, the recent iteration records too), the end. Everyone subscribed receives it;
// for those who have it already it changes nothing.
void send_snapshot(MonitorState& st, bool history) {
  if (st.hello) send_repeat(st, *st.hello);
  if (history)
    for (const MonitorMessage& m : st.history) send_repeat(st, m);
  else if (st.iteration)
    send_repeat(st, *st.iteration);
  if (st.validation) send_repeat(st, *st.validation);
  if (st.end) send_repeat(st, *st.end);
  st.last_snapshot = std::chrono::steady_clock::now();
}

bool publish(MonitorState& st, MonitorBody body) {
  if (st.end) return false;  // nothing follows a run's end (TrainingRun reports one as a fallback)
  MonitorMessage m{.seq = ++st.seq, .repeat = false, .unix_ms = unix_ms_now(), .body = std::move(body)};
  send(st, m);
  st.metrics->update(m);
  if (std::holds_alternative<MonitorIteration>(m.body)) {
    st.history.push_back(m);
    if (st.history.size() > kHistory) st.history.pop_front();
  }
  std::optional<MonitorMessage>* latest[] = {&st.hello, &st.iteration, &st.validation, &st.end};
  *latest[m.body.index()] = std::move(m);
  return true;
}

caf::behavior monitor_fn(MonitorActor* self, std::shared_ptr<MonitorSetup> setup) {
  MonitorState& st = self->state;
  st.publisher = std::move(setup->publisher);
  st.metrics = std::move(setup->metrics);
  st.http = std::move(setup->http);
  st.options = setup->options;
  publish(st, setup->hello);
  if (st.publisher) self->send(self, snapshot_atom::value);
  return {
      [self](publish_atom, MonitorBody& body) { return publish(self->state, std::move(body)); },
      [self](snapshot_atom) {
        MonitorState& s = self->state;
        const int fresh = s.publisher->take_new_subscriptions();
        s.subscriptions += uint64_t(fresh);
        if (fresh > 0 || std::chrono::steady_clock::now() - s.last_snapshot >= s.options.hello_interval)
          send_snapshot(s, fresh > 0);
        self->delayed_send(self, std::min(kPollInterval, s.options.hello_interval), snapshot_atom::value);
      },
  };
}

}  // namespace

MonitorSpawn spawn_monitor(caf::actor_system& system, const MonitorOptions& options, const MonitorHello& hello) {
  TROUPE_CHECK(options.enabled(), "spawn_monitor: neither --monitor-endpoint nor --metrics-port was given");
  TROUPE_CHECK(options.hello_interval.count() > 0, "the monitor's hello interval must be positive");
  auto setup = std::make_shared<MonitorSetup>();
  setup->options = options;
  setup->hello = hello;
  setup->metrics = std::make_shared<MonitorMetrics>();
  MonitorAddresses addresses;
  if (!options.endpoint.empty()) {
    setup->publisher = std::make_unique<MonitorPublisher>(options.endpoint, options.send_high_water_mark);
    addresses.endpoint = setup->publisher->endpoint();
  }
  if (options.metrics_port >= 0) {
    std::shared_ptr<MonitorMetrics> metrics = setup->metrics;
    setup->http = std::make_unique<MetricsHttpServer>(
        options.metrics_host, options.metrics_port, [metrics] { return metrics->prometheus_text(); },
        [metrics] { return metrics->health_json(); });
    addresses.metrics_url = str_cat("http://", options.metrics_host, ":", setup->http->port(), "/metrics");
  }
  // The publisher's socket moves to the actor's thread here: ZeroMQ allows that across a full
  // memory barrier, which handing it through the mailbox is.
  caf::actor actor = system.spawn<caf::detached>(monitor_fn, std::move(setup));
  return {std::move(actor), std::move(addresses)};
}

}  // namespace troupe::actors
