// The monitor actor's interface as caf::typed_actor (as actors/train/protocols.hpp does for the
// training actors): what it accepts, who sends it, what it answers. A handle of one of these
// types only sends what the monitor handles (a wrong message does not compile). The records:
// monitor_schema.hpp; the trace batches: trace_forwarding.hpp.
//
//   monitor_actor monitor = spawn_monitor(system, options, hello).monitor;
//   caf::anon_send(monitor, publish_atom::value, MonitorBody{iteration_record});
//   self->request(monitor, timeout, publish_atom::value, MonitorBody{end}).receive([](bool) {}, ...);
#pragma once

#include <caf/all.hpp>

#include "actors/monitor/monitor_schema.hpp"
#include "actors/monitor/trace_forwarding.hpp"

namespace troupe::actors {

// (MonitorBody) -> bool: publish a record; false when ignored (the run's end was published).
using publish_atom = caf::atom_constant<caf::atom("publish")>;
// The monitor to itself: look for new subscribers, re-send the snapshot when due.
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;

// The monitor as the trainer sees it: (trace_atom, TraceBatch), one training iteration's
// events, sent only after TraceQueue::try_push made room for them (no answer).
using monitor_trace_actor = caf::typed_actor<caf::reacts_to<trace_atom, TraceBatch>>;

// The monitor actor (monitor_actor.hpp): the trainer's trace batches (monitor_trace_actor) and
//   (publish_atom, MonitorBody) -> bool  from TrainingRun, troupe train's log lines and the
//                                        serving reporter (actors/serve): publish a record; false
//                                        once the run's end was published (then it is ignored)
//   (snapshot_atom)                      to itself, every poll interval while it publishes on
//                                        ZeroMQ: new subscribers get the run's state at once
using monitor_actor =
    monitor_trace_actor::extend<caf::replies_to<publish_atom, MonitorBody>::with<bool>, caf::reacts_to<snapshot_atom>>;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::MonitorBody)
