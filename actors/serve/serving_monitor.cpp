#include "actors/serve/serving_monitor.hpp"

#include "actors/monitor/monitor_actor.hpp"

namespace troupe::actors {

namespace {

struct ReporterState {
  // Not an aggregate: CAF builds a state from the actor's self pointer when it can, and C++20
  // would try that through `monitor` (a typed handle's constructor from an actor pointer).
  ReporterState() = default;
  monitor_actor monitor;
  std::unique_ptr<ServingAggregate> stats;
  static inline const char* name = "serving_reporter";
};

serving_reporter_actor::behavior_type reporter_fn(serving_reporter_actor::stateful_pointer<ReporterState> self,
                                                  monitor_actor monitor, int64_t replicas) {
  self->state.monitor = std::move(monitor);
  self->state.stats = std::make_unique<ServingAggregate>(
      replicas, std::chrono::duration<double>(kServingInterval).count(), ServingClock::now());
  auto publish = [self] {
    MonitorBody record{self->state.stats->record(ServingClock::now())};
    self->send(self->state.monitor, publish_atom::value, std::move(record));
  };
  self->delayed_send(self, kServingInterval, serving_tick_atom::value);
  return {
      [self](serving_atom, WorkerServingReport& r) { self->state.stats->apply(std::move(r), ServingClock::now()); },
      [self](in_flight_atom, int64_t requests) { self->state.stats->set_in_flight(requests); },
      [self, publish](serving_tick_atom) {
        publish();
        self->delayed_send(self, kServingInterval, serving_tick_atom::value);
      },
      // The monitor's mailbox has the record before the caller gets the answer.
      [publish](flush_atom) {
        publish();
        return true;
      },
      // The monitor answers publish_atom with whether it published: nothing to do here.
      [](bool) {},
  };
}

}  // namespace

ServingMonitor::ServingMonitor(caf::actor_system& system, const MonitorOptions& options, const MonitorHello& hello,
                               int64_t replicas)
    : system_(system) {
  MonitorSpawn spawned = spawn_monitor(system, options, hello);
  monitor_ = std::move(spawned.monitor);
  addresses_ = std::move(spawned.addresses);
  reporter_ = system.spawn(reporter_fn, monitor_, replicas);
}

ServingMonitor::~ServingMonitor() {
  end({.iteration = 0, .reason = "stopped", .detail = "the server was shut down before it reported its end"});
}

void ServingMonitor::end(MonitorEnd end) {
  if (!reporter_) return;
  caf::scoped_actor self{system_};
  const auto wait = std::chrono::seconds(5);
  self->request(reporter_, wait, flush_atom::value).receive([](bool) {}, [](caf::error&) {});
  // Waiting for the answer means the `end` was handed to ZeroMQ before the actor exits.
  self->request(monitor_, wait, publish_atom::value, MonitorBody{std::move(end)})
      .receive([](bool) {}, [](caf::error&) {});
  self->send_exit(reporter_, caf::exit_reason::user_shutdown);
  self->send_exit(monitor_, caf::exit_reason::user_shutdown);
  reporter_ = nullptr;
  monitor_ = nullptr;
}

}  // namespace troupe::actors
