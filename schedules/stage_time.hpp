// Where each pipeline stage's time went in one iteration, from the trace: computing (forward
// and backward), waiting on communication, on data, on a checkpoint, on the optimizer step,
// or idle (the pipeline bubble and anything else). The monitor derives it per iteration from
// the events the trainer forwards; the terminal view, /metrics and the dashboard show it.
//
//   StageTimes t = stage_times(events, /*stages=*/4, window_start_ns, window_end_ns);
//   double busy_share = double(t.stages[0].busy_ns) / double(t.window_ns());
//
// Each instant of the window [start, end) on a stage counts once, in the first category that
// covers it, in this order:
//   busy          a forward or backward op of this stage
//   communication a send, recv or grad_reduce event of this stage
//   data          a data-loader event (host), before the iteration's first forward: the
//                 pipeline waiting for its batches (prefetching that overlaps the previous
//                 iteration is not waiting)
//   checkpoint    a checkpoint event (host or this stage)
//   optimizer     an optimizer event (host or this stage)
//   idle          the rest
// so the six add up to the window. Windows of consecutive iterations tile the run's time
// (each starts where the previous ended), so a checkpoint saved between iterations lands in
// the next iteration's window, as the stall it is.
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/trace.hpp"

namespace troupe::schedules {

struct StageTime {
  int64_t busy_ns = 0, communication_ns = 0, data_ns = 0, checkpoint_ns = 0, optimizer_ns = 0, idle_ns = 0;
  bool operator==(const StageTime&) const = default;
};

struct StageTimes {
  int64_t start_ns = 0, end_ns = 0;
  std::vector<StageTime> stages;  // (P)
  int64_t window_ns() const { return end_ns - start_ns; }
};

// `events`: the iteration's events (others too: each is clipped to the window); stage ops
// with a stage outside [0, stages) are ignored.
StageTimes stage_times(const std::vector<TraceEvent>& events, int stages, int64_t start_ns, int64_t end_ns);

}  // namespace troupe::schedules
