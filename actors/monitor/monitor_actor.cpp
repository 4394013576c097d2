#include "actors/monitor/monitor_actor.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>

#include "actors/monitor/dashboard_page.hpp"
#include "actors/monitor/metrics_http_server.hpp"
#include "actors/monitor/monitor_history.hpp"
#include "actors/monitor/monitor_metrics.hpp"
#include "actors/monitor/monitor_publisher.hpp"
#include "base/check.hpp"
#include "schedules/stage_time.hpp"

namespace troupe::actors {

namespace {

// How often the actor checks for new subscribers: a subscriber waits at most this long for
// its first snapshot.
constexpr std::chrono::milliseconds kPollInterval{200};
// Iteration records a new subscriber gets at once, so its loss chart starts with a history.
constexpr size_t kHistory = 64;
// `trace` messages a new subscriber gets at once (the latest iterations' timelines).
constexpr size_t kTraceHistory = 8;
// Events per `trace` message: a large iteration is split (readers limit arrays to 65536).
constexpr size_t kEventsPerMessage = 4096;

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What spawn_monitor prepared on the caller's thread (bound sockets), handed to the actor.
struct MonitorSetup {
  MonitorOptions options;
  MonitorHello hello;
  schedules::TraceHeader trace;
  std::shared_ptr<TraceQueue> trace_queue;
  std::unique_ptr<MonitorPublisher> publisher;  // null without --monitor-endpoint
  std::shared_ptr<MonitorMetrics> metrics;
  std::shared_ptr<MonitorHistory> dashboard;
  std::unique_ptr<MetricsHttpServer> http;  // null without --metrics-port
};

struct MonitorState {
  // Declaration order = reverse destruction order: the HTTP server stops first (its handlers
  // read `metrics` and `dashboard`), the socket closes last (it lingers briefly to let the `end` out).
  std::unique_ptr<MonitorPublisher> publisher;
  std::shared_ptr<MonitorMetrics> metrics;
  std::shared_ptr<MonitorHistory> dashboard;
  std::unique_ptr<MetricsHttpServer> http;
  MonitorOptions options;
  schedules::TraceHeader trace;
  std::shared_ptr<TraceQueue> trace_queue;
  int64_t window_end_ns = -1;  // where the last traced iteration's window ended (-1: none yet)
  uint64_t seq = 0;
  uint64_t subscriptions = 0;
  // The latest record of each type, as first published (seq, time): the snapshot.
  std::optional<MonitorMessage> hello, iteration, validation, end, stages, serving;
  std::deque<MonitorMessage> history;  // the latest kHistory iteration records
  std::deque<MonitorMessage> traces;   // the latest kTraceHistory trace records
  std::chrono::steady_clock::time_point last_snapshot = std::chrono::steady_clock::now();
  static inline const char* name = "monitor";
};

using MonitorSelf = monitor_actor::stateful_pointer<MonitorState>;

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
  if (history) {
    for (const MonitorMessage& m : st.history) send_repeat(st, m);
    for (const MonitorMessage& m : st.traces) send_repeat(st, m);
  } else if (st.iteration) {
    send_repeat(st, *st.iteration);
  }
  if (st.stages) send_repeat(st, *st.stages);
  if (st.serving) send_repeat(st, *st.serving);
  if (st.validation) send_repeat(st, *st.validation);
  if (st.end) send_repeat(st, *st.end);
  st.last_snapshot = std::chrono::steady_clock::now();
}

bool publish(MonitorState& st, MonitorBody body) {
  if (st.end) return false;  // nothing follows a run's end (TrainingRun reports one as a fallback)
  MonitorMessage m{.seq = ++st.seq, .repeat = false, .unix_ms = unix_ms_now(), .body = std::move(body)};
  send(st, m);
  st.metrics->update(m);
  st.dashboard->update(m);
  auto keep = [&](std::deque<MonitorMessage>& recent, size_t n) {
    recent.push_back(m);
    if (recent.size() > n) recent.pop_front();
  };
  if (std::holds_alternative<MonitorIteration>(m.body)) keep(st.history, kHistory);
  if (std::holds_alternative<MonitorTrace>(m.body)) keep(st.traces, kTraceHistory);
  std::optional<MonitorMessage>* latest[] = {&st.hello, &st.iteration, &st.validation, &st.end,
                                             nullptr,   &st.stages,    &st.serving};
  static_assert(std::size(latest) == std::variant_size_v<MonitorBody>);
  if (std::optional<MonitorMessage>* slot = latest[m.body.index()]) *slot = std::move(m);
  return true;
}

MonitorStages to_record(int64_t iteration, const schedules::StageTimes& t) {
  MonitorStages r;
  r.iteration = iteration, r.start_ns = t.start_ns, r.end_ns = t.end_ns;
  for (const schedules::StageTime& s : t.stages) {
    r.busy_ns.push_back(s.busy_ns), r.communication_ns.push_back(s.communication_ns), r.data_ns.push_back(s.data_ns);
    r.checkpoint_ns.push_back(s.checkpoint_ns), r.optimizer_ns.push_back(s.optimizer_ns),
        r.idle_ns.push_back(s.idle_ns);
  }
  return r;
}

// One iteration's events from the trainer: published as `trace` (in parts when large), and
// the stages' time over the iteration's window (from the previous window's end) as `stages`.
void publish_trace(MonitorState& st, TraceBatch& batch) {
  st.trace_queue->pop(int64_t(batch.events.size()));
  int64_t start_ns = st.window_end_ns;
  if (start_ns < 0) {
    start_ns = batch.end_ns;
    for (const schedules::TraceEvent& e : batch.events) start_ns = std::min(start_ns, e.start_ns);
  }
  st.window_end_ns = batch.end_ns;
  const schedules::TraceHeader& h = st.trace;
  for (size_t first = 0; first < batch.events.size() || first == 0; first += kEventsPerMessage) {
    const size_t last = std::min(batch.events.size(), first + kEventsPerMessage);
    MonitorTrace t{.iteration = batch.iteration,
                   .schedule = schedules::schedule_name(h.schedule),
                   .stages = h.shape.stages,
                   .chunks = h.shape.chunks,
                   .microbatches = h.shape.microbatches,
                   .group_size = h.shape.group_size,
                   .num_layers = h.num_layers,
                   .chunk_layers = {h.chunk_layers.begin(), h.chunk_layers.end()},
                   .dropped_events = st.trace_queue->dropped(),
                   .events = {batch.events.begin() + ptrdiff_t(first), batch.events.begin() + ptrdiff_t(last)}};
    publish(st, std::move(t));
    if (last == batch.events.size()) break;
  }
  publish(st, to_record(batch.iteration, schedules::stage_times(batch.events, h.shape.stages, start_ns, batch.end_ns)));
}

monitor_actor::behavior_type monitor_fn(MonitorSelf self, std::shared_ptr<MonitorSetup> setup) {
  MonitorState& st = self->state;
  st.publisher = std::move(setup->publisher);
  st.metrics = std::move(setup->metrics);
  st.dashboard = std::move(setup->dashboard);
  st.http = std::move(setup->http);
  st.options = setup->options;
  st.trace = setup->trace;
  st.trace_queue = setup->trace_queue;
  publish(st, setup->hello);
  if (st.publisher) self->send(self, snapshot_atom::value);
  return {
      [self](publish_atom, MonitorBody& body) { return publish(self->state, std::move(body)); },
      [self](trace_atom, TraceBatch& batch) { publish_trace(self->state, batch); },
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

MonitorSpawn spawn_monitor(caf::actor_system& system, const MonitorOptions& options, const MonitorHello& hello,
                           const schedules::TraceHeader& trace, ActorThread thread) {
  TROUPE_CHECK(options.enabled(), "spawn_monitor: neither --monitor-endpoint nor --metrics-port was given");
  TROUPE_CHECK(options.hello_interval.count() > 0, "the monitor's hello interval must be positive");
  auto setup = std::make_shared<MonitorSetup>();
  setup->options = options;
  setup->hello = hello;
  setup->trace = trace;
  setup->trace_queue = std::make_shared<TraceQueue>(kMonitorTraceCapacity);
  setup->metrics = std::make_shared<MonitorMetrics>();
  setup->dashboard = std::make_shared<MonitorHistory>();
  MonitorAddresses addresses;
  if (!options.endpoint.empty()) {
    setup->publisher = std::make_unique<MonitorPublisher>(options.endpoint, options.send_high_water_mark);
    addresses.endpoint = setup->publisher->endpoint();
  }
  if (options.metrics_port >= 0) {
    std::shared_ptr<MonitorMetrics> metrics = setup->metrics;
    std::shared_ptr<MonitorHistory> dashboard = setup->dashboard;
    setup->http = std::make_unique<MetricsHttpServer>(
        options.metrics_host, options.metrics_port,
        std::vector<MetricsRoute>{
            {"/metrics", "text/plain; version=0.0.4; charset=utf-8", [metrics] { return metrics->prometheus_text(); }},
            {"/health", "application/json", [metrics] { return metrics->health_json(); }},
            {"/", "text/html; charset=utf-8", [] { return std::string(dashboard_html()); }},
            {"/api/history", "application/json", [dashboard] { return dashboard->json(); }},
        });
    addresses.metrics_url = str_cat("http://", options.metrics_host, ":", setup->http->port(), "/metrics");
  }
  // The publisher's socket moves to the actor's thread here: ZeroMQ allows that across a full
  // memory barrier, which handing it through the mailbox is.
  std::shared_ptr<TraceQueue> queue = setup->trace_queue;
  monitor_actor monitor;
  if (thread == ActorThread::scheduled)
    monitor = system.spawn(monitor_fn, std::move(setup));
  else
    monitor = system.spawn<caf::detached>(monitor_fn, std::move(setup));
  return {std::move(monitor), std::move(addresses), std::move(queue)};
}

}  // namespace troupe::actors
