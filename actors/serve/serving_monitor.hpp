// `troupe serve`'s monitor: the monitor actor (actors/monitor/monitor_actor.hpp) in the inference pool's
// actor system, and a serving reporter actor in front of it. The pool's router tells the
// reporter how many requests it has in flight, each worker sends a WorkerServingReport after
// its engine steps (actors/serve/serving_stats.hpp: throttled, counts since the start); all of it
// fire-and-forget, so serving never waits on monitoring. Every interval the reporter turns the
// latest reports into one `serving` record and hands it to the monitor actor, which publishes
// it and keeps it for /metrics. end() sends a last record, then the `end`, and stops both.
// The reporter's interface: serving_reporter_actor (actors/serve/protocols.hpp).
//
//   ServingMonitor m(system, options, hello, replicas);           // binds; throws naming the port
//   caf::anon_send(router, serving_atom::value, m.reporter());    // and to each worker
//   m.end({.iteration = 0, .reason = "stopped", .detail = "signal 15"});
#pragma once

#include <caf/all.hpp>

#include <chrono>

#include "actors/monitor/monitor_options.hpp"
#include "actors/monitor/monitor_schema.hpp"
#include "actors/monitor/protocols.hpp"
#include "actors/serve/protocols.hpp"

namespace troupe::actors {

// How often a `serving` record is published.
inline constexpr std::chrono::milliseconds kServingInterval{500};

class ServingMonitor {
 public:
  ServingMonitor(caf::actor_system& system, const MonitorOptions& options, const MonitorHello& hello, int64_t replicas);
  ~ServingMonitor();  // end() as "stopped" unless it was called
  ServingMonitor(const ServingMonitor&) = delete;
  ServingMonitor& operator=(const ServingMonitor&) = delete;

  const MonitorAddresses& addresses() const { return addresses_; }
  const serving_reporter_actor& reporter() const { return reporter_; }
  // Publishes a last `serving` record and `end`, waiting (a few seconds at most) until both
  // were handed to ZeroMQ, then stops the actors. Only the first call does anything.
  void end(MonitorEnd end);

 private:
  caf::actor_system& system_;
  monitor_actor monitor_;
  serving_reporter_actor reporter_;
  MonitorAddresses addresses_;
};

}  // namespace troupe::actors
