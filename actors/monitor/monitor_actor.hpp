// The monitor actor: the run's live face to the outside. It receives records (the log line's
// numbers, validation results, `troupe serve`'s serving state, the end;
// actors/monitor/monitor_schema.hpp), numbers them, publishes each on a ZeroMQ XPUB socket
// (actors/monitor/monitor_publisher.hpp: never blocks, a slow subscriber loses messages, not the run
// its time) and keeps the latest values for Prometheus /metrics
// (actors/monitor/monitor_metrics.hpp, served by actors/monitor/metrics_http_server.hpp). Every
// hello_interval, and whenever someone subscribes, it re-sends the hello and the latest
// records as repeats, so `troupe monitor` attaching mid-run sees the whole state at once.
// The trainer forwards each iteration's trace events (trace_atom, TraceBatch; bounded by the
// TraceQueue, actors/monitor/trace_forwarding.hpp); the monitor publishes them as `trace` messages and
// derives the per-stage breakdown of the iteration's time (`stages`, schedules/stage_time.hpp).
// Spawned detached: the socket stays on one thread, and the training actors never wait on it.
// Its interface: monitor_actor (actors/monitor/protocols.hpp).
//
//   MonitorSpawn m = spawn_monitor(system, options, hello);   // binds; throws naming an endpoint
//   caf::anon_send(m.monitor, publish_atom::value, MonitorBody{iteration_record});
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/actor_thread.hpp"
#include "actors/monitor/monitor_options.hpp"
#include "actors/monitor/monitor_schema.hpp"
#include "actors/monitor/protocols.hpp"
#include "actors/monitor/trace_forwarding.hpp"

namespace troupe::actors {

struct MonitorSpawn {
  monitor_actor monitor;
  MonitorAddresses addresses;
  std::shared_ptr<TraceQueue> trace_queue;  // for the trainer's attach_atom
};

// Events the trainer may have in flight to the monitor before it drops (TraceQueue).
inline constexpr int64_t kMonitorTraceCapacity = 1 << 13;

// Binds the ZeroMQ endpoint and the HTTP port here, on the caller's thread, so a port in use
// is a troupe::Error naming it; then spawns the actor, which publishes `hello` first.
// `trace` describes the run's pipeline for the `trace` messages (as a trace file's header).
// `thread`: detached in production; scheduled for tests on CAF's test coordinator.
MonitorSpawn spawn_monitor(caf::actor_system& system, const MonitorOptions& options, const MonitorHello& hello,
                           const schedules::TraceHeader& trace = {}, ActorThread thread = ActorThread::detached);

}  // namespace troupe::actors
