// What each op of a pipeline costs, fitted to a recorded trace, for predicting other pipeline
// shapes (`troupe replay --what-if`; docs/replay-and-traces.md, "Cost model").
//
// A forward (or backward) op of virtual stage k of K costs
//     n_k * layer + op + [k == 0] * first + [k == K-1] * last
// n_k transformer layers at `layer` each, the op's own fixed cost (OpOverhead: what it spends
// around its layers, read from the trace's layer spans), plus the embedding on the first virtual
// stage and the final norm, LM head and loss on the last: those two chunks are slower than the
// others by a fixed amount however the layers are split. A split backward pays the fixed cost
// twice, once for B and once for W. A transfer between virtual stages k and k+1
// crosses the link transfer_link() names (from stage k mod P to (k+1) mod P, or zb_v's way down
// and back up) and costs that link's latency in its direction, once per microbatch and
// direction, so a schedule with more chunks per stage pays more transfers.
//
//   OpCostModel m = fit_op_cost_model(trace.header, measured_durations(trace, iterations));
//   OpDurations d = model_durations(m, {.stages = 4, .chunks = 2, .microbatches = 8});
//   Simulation prediction = simulate(Schedule::interleaved_1f1b, d_shape, d);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedules/layer_time.hpp"
#include "schedules/simulator.hpp"
#include "schedules/trace.hpp"

namespace troupe::schedules {

// One kind of op (forward, backward; the W part of a split backward).
struct OpKindCost {
  double layer_ns = 0;  // one transformer layer
  double first_ns = 0;  // extra on the first virtual stage: the embedding
  double last_ns = 0;   // extra on the last virtual stage: final norm, LM head and loss
};

// What one op spends outside its transformer layers beyond the embedding and the LM head (its
// set-up, hand-offs and small kernels), paid once per op however many layers it holds: the mean
// time around the layer spans of the ops of the virtual stages between the first and the last
// (with two virtual stages, of the first: the embedding taken as free). All 0 where the trace
// has no layer spans, or one virtual stage (the extras cannot be told apart).
struct OpOverhead {
  double forward_ns = 0;
  double backward_ns = 0;  // a fused backward, or B of a split one
  double weight_ns = 0;    // W of a split one; a trace of fused backwards: taken as the backward's
  bool measured() const { return forward_ns > 0 || backward_ns > 0; }  // the trace gave it
};

// The overhead read from `layers` (layer_time() of a trace with `header`).
OpOverhead op_overhead(const TraceHeader& header, const LayerTime& layers);

struct OpCostModel {
  OpKindCost forward, backward;  // backward: the whole of it, B + W, less the ops' overhead
  // The weight-gradient part of the backward, when the trace measured it (B and W events, or
  // fused backwards that timed their weight-gradient part); otherwise W is taken as half the
  // backward (OpDurations::weight_ns).
  bool has_weight = false;
  OpKindCost weight;
  OpOverhead overhead;
  bool recorded_split = false;  // the trace ran B and W ops (its backward paid both overheads)
  double model_layers = 0;      // the layers `layer_ns` counts (the model's; P*V slices when unknown)
  int stages = 0;               // of the recorded pipeline (the links below are its)
  // Latency of the link from stage s to (s+1) mod P ("activation": what activations take there
  // except on zb_v's way back up), and back ("gradient"); -1 where the recorded run never used
  // it (1F1B never sends from the last stage to the first).
  std::vector<int64_t> activation_link_ns, gradient_link_ns;  // (P)
  int64_t activation_ns = 0, gradient_ns = 0;                 // mean over the links used: for links not seen
  // Each recorded stage's turnaround between ops (OpDurations::dispatch_ns), and their mean.
  std::vector<int64_t> dispatch_ns;
  int64_t mean_dispatch_ns = 0;
  // How the layer cost was told apart from the first and last chunks' extra work: "middle
  // chunks" (some chunk holds neither), "embedding taken as free" (two chunks: one equation
  // short), "one chunk" (no split at all: the extras stay inside the layer cost).
  std::string fit;
};

// Layers per virtual stage (K = P*V entries): `chunk_layers` when given, else an even split of
// `num_layers` (of K slices when num_layers is 0).
std::vector<double> chunk_layer_counts(const PipelineShape& shape, int num_layers,
                                       const std::vector<int>& chunk_layers);

// The model fitted to `measured` (measured_durations() of a trace with `header`; `layers`, its
// layer spans, give the ops' overhead): the layer cost from the chunks that hold neither the
// embedding nor the LM head, the first and last chunks' extra as what they take beyond their
// layers and overhead (never below 0), and the link latencies from the per-edge ones measured.
OpCostModel fit_op_cost_model(const TraceHeader& header, const OpDurations& measured, const LayerTime& layers = {});

// Durations of every op and transfer of another pipeline: `shape` with its layers split as
// `chunk_layers` (empty: evenly), its chunks placed as `placement` says, its backward split
// into B and W ops (each paying the op overhead) when `splits_backward`. The links keep their recorded latency where
// the stage count is the same; links not seen, and every link of another stage count, take the mean; so do the stages'
// turnaround times.
OpDurations model_durations(const OpCostModel& model, const PipelineShape& shape,
                            const std::vector<int>& chunk_layers = {}, Placement placement = Placement::loop,
                            bool splits_backward = false);

// `measured` (a trace's own durations) for the same chunks under a schedule that splits the
// backward or not (`splits_backward`) where the trace did the other: the W op's overhead added
// to (or taken from) each backward, and W itself.
OpDurations with_weight_ops(const OpCostModel& model, OpDurations measured, bool splits_backward);

// The model as text for the report: per-layer, embedding and LM-head costs, link latencies.
// `splits_backward`: a what-if uses B and W ops, so say how W was taken when none was recorded.
std::string format_op_cost_model(const OpCostModel& model, bool splits_backward);

}  // namespace troupe::schedules
