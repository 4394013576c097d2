// Trace events on their way from the trainer to the monitor actor, without ever making the
// trainer wait: the trainer collects an iteration's events (the same ones --trace writes)
// and hands them over as one TraceBatch when the iteration ends; a TraceQueue bounds how many
// events may sit in the monitor's mailbox. When the monitor falls behind by more than the
// capacity, whole batches are dropped and counted (the monitor publishes the count), so a
// slow monitor costs the run nothing but its own trace.
//
//   auto queue = std::make_shared<TraceQueue>(65536);
//   caf::anon_send(trainer, attach_atom::value, monitor, queue);       // the trainer forwards
//   if (queue->try_push(batch.events.size())) send(monitor, trace_atom::value, batch);
//   ... on the monitor: queue->pop(batch.events.size());
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "schedules/trace.hpp"

namespace troupe::actors {

// (monitor_trace_actor monitor, std::shared_ptr<TraceQueue>): to the trainer, forward trace batches there.
using attach_atom = caf::atom_constant<caf::atom("attach")>;
// (TraceBatch): trainer -> monitor, one iteration's events.
using trace_atom = caf::atom_constant<caf::atom("trace")>;
// (TraceEvent): TrainingRun -> trainer, a host op between iterations (a checkpoint save).
using host_op_atom = caf::atom_constant<caf::atom("host_op")>;

// The events of one training iteration, and when the trainer finished it (trace clock).
struct TraceBatch {
  int64_t iteration = 0;
  int64_t end_ns = 0;
  std::vector<schedules::TraceEvent> events;
};

// How many forwarded events are in flight to the monitor, bounded; drops counted. Both sides
// touch it from their own threads.
class TraceQueue {
 public:
  explicit TraceQueue(int64_t capacity) : capacity_(capacity) {}
  // Reserves room for n events; false (and n counted as dropped) when that would exceed the capacity.
  bool try_push(int64_t n);
  // The monitor took n events out of its mailbox.
  void pop(int64_t n) { queued_.fetch_sub(n, std::memory_order_relaxed); }
  int64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  int64_t capacity() const { return capacity_; }

 private:
  const int64_t capacity_;
  std::atomic<int64_t> queued_{0}, dropped_{0};
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::TraceBatch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::actors::TraceQueue>)
