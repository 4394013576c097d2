#include "schedules/layer_time.hpp"

#include <set>
#include <tuple>

namespace troupe::schedules {

LayerTime layer_time(const std::vector<TraceEvent>& events, const std::vector<int64_t>& iterations) {
  const std::set<int64_t> wanted(iterations.begin(), iterations.end());
  auto counted = [&](const TraceEvent& e) { return wanted.empty() || wanted.count(e.iteration) > 0; };
  // The layer spans of each (stage, iteration, microbatch, chunk), as (start, end).
  std::map<std::tuple<int, int64_t, int, int>, std::vector<std::pair<int64_t, int64_t>>> spans;
  LayerTime out;
  for (const TraceEvent& e : events)
    if (e.kind == EventKind::layer && counted(e)) {
      spans[{e.stage, e.iteration, e.microbatch, e.chunk}].push_back({e.start_ns, e.end_ns});
      auto& [layers, ns] = out.stage_layers[e.stage];
      ++layers;
      ns += e.end_ns - e.start_ns;
    }
  std::map<EventKind, LayerTimeOfKind> by_kind;
  for (const TraceEvent& e : events) {
    if (!is_op_kind(e.kind) || !counted(e)) continue;
    const auto it = spans.find({e.stage, e.iteration, e.microbatch, e.chunk});
    if (it == spans.end()) continue;
    int64_t n = 0, ns = 0;
    for (const auto& [lo, hi] : it->second)
      if (e.start_ns <= lo && hi <= e.end_ns) ++n, ns += hi - lo;
    if (n == 0) continue;
    LayerTimeOfKind& k = by_kind[e.kind];
    k.kind = e.kind;
    ++k.ops;
    k.layers += n;
    k.layer_ns += ns;
    auto& [ops, around_ns] = k.around[{e.stage, e.chunk}];
    ++ops;
    around_ns += (e.end_ns - e.start_ns) - ns;
  }
  for (auto& [kind, k] : by_kind) out.kinds.push_back(std::move(k));
  return out;
}

}  // namespace troupe::schedules
