// How much of an MoE run's expert-parallel all-to-all time the trace shows hidden: the
// moe_dispatch / moe_combine spans (on the all-to-all stream) against the moe_overlap spans
// (the compute enqueued beside them, on the op's stream) of the same stage and microbatch op,
// and against the other ops of the stage in flight at the time (--overlap-moe-expert-parallel-
// comm: a forward beside the backward of another microbatch). Time of an all-to-all covered by
// overlapped compute counts as hidden; time while another op ran, as beside it.
//
//   AllToAllOverlap o = all_to_all_overlap(trace.events, {2, 3, 4});   // iterations to count
//   if (o.spans > 0) ... o.hidden_fraction() ...
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/trace.hpp"

namespace troupe::schedules {

struct AllToAllOverlap {
  int64_t spans = 0;        // dispatch and combine spans counted
  int64_t dispatch_ns = 0;  // their summed durations
  int64_t combine_ns = 0;
  int64_t hidden_ns = 0;   // of those, the time overlapped compute ran beside them
  int64_t overlap_ns = 0;  // the overlapped compute's own summed durations
  int64_t beside_ns = 0;   // of the exchanges' time, what another op of the stage was in flight for
  int64_t covered_ns = 0;  // what either covered
  int iterations = 0;      // iterations counted
  int stages = 0;          // stages with spans
  int64_t total_ns() const { return dispatch_ns + combine_ns; }
  double hidden_fraction() const { return share(hidden_ns); }
  double beside_fraction() const { return share(beside_ns); }
  double covered_fraction() const { return share(covered_ns); }
  double share(int64_t ns) const { return total_ns() > 0 ? double(ns) / double(total_ns()) : 0.0; }
};

// Over the events of the listed iterations (all of them when empty).
AllToAllOverlap all_to_all_overlap(const std::vector<TraceEvent>& events, const std::vector<int64_t>& iterations);

}  // namespace troupe::schedules
