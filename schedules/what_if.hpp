// "What if this run had used another schedule or shape?": measured op durations from a
// trace, rescaled to another pipeline shape, fed through the simulator.
//
//   WhatIf w = parse_what_if("schedule=interleaved,v=2", trace.header);
//   OpDurations d = measured_durations(trace, {5, 6, 7});
//   Simulation pred = simulate(w.schedule, w.shape, rescale_durations(d, trace.header.shape, w.shape));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedules/simulator.hpp"
#include "schedules/trace.hpp"

namespace troupe::schedules {

struct WhatIf {
  Schedule schedule;
  PipelineShape shape;
};

// A comma-separated list of key=value over the recorded run: schedule=gpipe|1f1b|interleaved,
// p=stages, v=chunks per stage, m=microbatches, g=microbatch group size (0: P). Unnamed
// values keep the recorded ones, except that v > 1 alone selects interleaving and a
// non-interleaved schedule alone sets v = 1. The result is validated (Megatron's
// constraints), and when the header knows the layer count, L must divide into P*V chunks.
// Throws troupe::Error saying what is wrong with the string.
WhatIf parse_what_if(const std::string& spec, const TraceHeader& recorded);

// Mean forward and backward time per (stage, chunk) over the forward/backward events of the
// given iterations (all when empty), and the mean send duration as the P2P latency (0 when
// the trace has no sends). Throws when a (stage, chunk) of the header's shape has no event.
OpDurations measured_durations(const Trace& trace, const std::vector<int64_t>& iterations = {});

// Durations for another shape, assuming time is spread evenly over the layers within each
// recorded chunk: virtual stage k of K = P*V holds the model's slice [k/K, (k+1)/K) (chunk c of
// stage s is virtual stage c*P + s, Megatron's placement), and a new chunk costs the sum of
// the recorded slices it overlaps, in proportion. Same shape in: same durations out.
OpDurations rescale_durations(const OpDurations& measured, const PipelineShape& from, const PipelineShape& to);

}  // namespace troupe::schedules
