// A "recorded" trace for the schedule tests: the simulator's, over several iterations back to
// back `gap_ns` apart, the first one's forwards `first_slowdown` times slower (a real first
// iteration pays one-time costs).
#pragma once

#include "schedules/simulator.hpp"

namespace troupe::schedules {

inline Trace recorded_trace(Schedule sch, const PipelineShape& shape, const OpDurations& d, int iterations,
                            int64_t first_slowdown = 1, int64_t gap_ns = 1000) {
  Trace out;
  int64_t t0 = 0;
  for (int it = 0; it < iterations; ++it) {
    OpDurations di = d;
    if (it == 0)
      for (auto& row : di.forward_ns)
        for (auto& t : row) t *= first_slowdown;
    const Simulation sim = simulate(sch, shape, di);
    out.header = sim.trace.header;
    for (TraceEvent e : sim.trace.events) {
      e.iteration = it;
      e.start_ns += t0, e.end_ns += t0;
      out.events.push_back(e);
    }
    t0 += sim.stats.end_ns + gap_ns;
  }
  return out;
}

}  // namespace troupe::schedules
