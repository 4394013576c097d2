// What a pipeline trace says: per-stage busy and idle time, the bubble fraction, peak
// activations in flight, the critical path, and mean op durations (the simulator's input
// for a what-if). Works on recorded traces and on simulated ones alike; only forward and
// backward events of one iteration are looked at (filter with trace_iteration()).
//
//   PipelineStats s = pipeline_stats(trace_iteration(trace, 5));
//   std::vector<TraceEvent> path = critical_path(trace_iteration(trace, 5));
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/trace.hpp"

namespace troupe::schedules {

struct StageStats {
  int64_t busy_ns = 0;  // sum of forward + backward op durations
  int64_t idle_ns = 0;  // step time - busy
  int ops = 0;
  int peak_in_flight = 0;  // most forwards not yet backpropagated (ops in start order)
};

struct PipelineStats {
  int64_t start_ns = 0, end_ns = 0;  // first op start, last op end over all stages
  int64_t step_ns = 0;               // end - start
  std::vector<StageStats> stages;    // (P)
  // 1 - sum(busy) / (P * step): the share of stage-time spent idle.
  double bubble_fraction = 0;
};

PipelineStats pipeline_stats(const Trace& iteration);

// The chain of dependent ops that sets the step time, first op first. Each op's predecessor
// is whichever of its dependencies finished last: the previous op on its stage, or its data
// input (forward of the previous virtual stage; backward of the next virtual stage, or on the
// last virtual stage its own forward).
std::vector<TraceEvent> critical_path(const Trace& iteration);

// Per-stage op orders (events sorted by start time).
std::vector<std::vector<Op>> stage_orders(const Trace& iteration);

}  // namespace troupe::schedules
