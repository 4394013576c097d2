// "What if this run had used another schedule or shape?": measured op durations and transfer
// latencies from a trace, carried to another pipeline shape by the per-op cost model
// (op_cost_model.hpp), fed through the simulator.
//
//   WhatIf w = parse_what_if("schedule=interleaved,v=2", trace.header);
//   OpDurations d = measured_durations(trace, {5, 6, 7});
//   Simulation pred = simulate(w.schedule, w.shape, predict_durations(d, trace.header, w.schedule, w.shape));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedules/stage_speed.hpp"
#include "schedules/op_cost_model.hpp"
#include "schedules/simulator.hpp"
#include "schedules/trace.hpp"

namespace troupe::schedules {

struct WhatIf {
  Schedule schedule;
  PipelineShape shape;
};

// A comma-separated list of key=value over the recorded run:
// schedule=gpipe|1f1b|interleaved|zb-h1|zb-v, p=stages, v=chunks per stage, m=microbatches,
// g=microbatch group size (0: P). Unnamed values keep the recorded ones, except that v > 1
// alone selects interleaving and a non-interleaved schedule alone sets v = 1 (zb-v: 2). The result is validated
// (Megatron's constraints), and when the header knows the layer count, L must divide into P*V chunks. Throws
// troupe::Error saying what is wrong with the string.
WhatIf parse_what_if(const std::string& spec, const TraceHeader& recorded);

// Mean forward and backward time per (stage, chunk) over the op events of the given
// iterations (all when empty); a trace of a split backward gives backward = mean B + mean W
// and weight_ns = mean W; a fused trace gives weight_ns = the mean backward times the share of their time
// the backwards that measured it spent on weight gradients (TraceEvent::weight_ns; empty, W = half the
// backward, unless every stage and chunk has such a backward), and the transfer latency of
// every edge between virtual stages (transfer_latency.hpp; an edge without a sample takes the mean of the others) with
// their mean as p2p_ns (a trace with `send` events but no measurable edge: the mean send), and
// each stage's turnaround between ops (dispatch_ns).
// Throws when a (stage, chunk) of the header's shape has no event.
OpDurations measured_durations(const Trace& trace, const std::vector<int64_t>& iterations = {});

// Durations for `schedule` on `to`: the measured ones where the chunks are the recorded ones
// (same P, V and placement()), else the cost model fitted to them (op_cost_model.hpp): layers at their measured cost,
// each op's overhead (from `layers`, the trace's layer spans), the embedding and the LM head and loss on the new first
// and last chunks, the link latencies on every transfer the new pipeline makes. Either way a W op that one of the two
// schedules runs and the other does not adds (or takes away) its overhead.
OpDurations predict_durations(const OpDurations& measured, const TraceHeader& recorded, Schedule schedule,
                              const PipelineShape& to, const LayerTime& layers = {});

// The what-if's run: predict_durations() from the measured durations at the reference speed
// (`speed`, schedules/stage_speed.hpp), each stage's ops then run at the speed its simulated load
// gives, simulated again until the loads settle (a few rounds; load moves op times by a few
// percent). Without a fitted speed model: one simulation of predict_durations().
Simulation predict_run(const OpDurations& measured, const TraceHeader& recorded, const LayerTime& layers,
                       const SpeedModel& speed, Schedule schedule, const PipelineShape& to);

}  // namespace troupe::schedules
