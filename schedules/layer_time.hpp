// What an op's transformer layers take and what the op spends around them (the embedding, the
// LM head and loss, its own set-up), from the layer spans (EventKind::layer) a traced run marks
// in each chunk's first microbatch's ops: per op kind, the mean per layer and, per stage and
// chunk, the mean time around the layers.
//
//   LayerTime t = layer_time(trace.events, {2, 3, 4});   // iterations to count
//   for (const LayerTimeOfKind& k : t.kinds) ... k.layer_ns / k.layers ...
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "schedules/trace.hpp"

namespace troupe::schedules {

struct LayerTimeOfKind {
  EventKind kind = EventKind::forward;  // forward, backward, backward_input or backward_weight
  int64_t ops = 0;                      // ops of this kind that marked their layers
  int64_t layers = 0;                   // their layer spans
  int64_t layer_ns = 0;                 // the spans' summed durations
  // (stage, chunk) -> (ops, summed time of those ops outside their layer spans)
  std::map<std::pair<int, int>, std::pair<int64_t, int64_t>> around;
};

struct LayerTime {
  std::vector<LayerTimeOfKind> kinds;  // the op kinds with layer spans, in EventKind order
  // stage -> (its layer spans, their summed durations), every layer span of the iterations
  std::map<int, std::pair<int64_t, int64_t>> stage_layers;
};

// Over the events of the listed iterations (all of them when empty). A layer span belongs to
// the op of its stage, iteration, microbatch and chunk whose interval holds it.
LayerTime layer_time(const std::vector<TraceEvent>& events, const std::vector<int64_t>& iterations);

}  // namespace troupe::schedules
