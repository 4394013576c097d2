#include "schedules/stage_time.hpp"

#include <algorithm>
#include <array>
#include <climits>

namespace troupe::schedules {

namespace {

// In the order of precedence (stage_time.hpp); idle is what none covers.
enum Category { busy, communication, data, checkpoint, optimizer, kCategories };

int category_of(EventKind kind) {
  switch (kind) {
    case EventKind::forward:
    case EventKind::backward:
    case EventKind::backward_input:
    case EventKind::backward_weight:
      return busy;
    case EventKind::send:
    case EventKind::recv:
    case EventKind::grad_reduce:
      return communication;
    case EventKind::data:
      return data;
    case EventKind::checkpoint:
      return checkpoint;
    case EventKind::optimizer:
      return optimizer;
    default:
      return -1;
  }
}

struct Edge {
  int64_t t;
  int category;
  int delta;  // +1 start, -1 end
};

StageTime sweep(std::vector<Edge>& edges, int64_t start_ns, int64_t end_ns) {
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  std::array<int, kCategories> open{};
  std::array<int64_t, kCategories + 1> total{};  // the last: idle
  int64_t prev = start_ns;
  for (const Edge& e : edges) {
    if (e.t > prev) {
      int c = 0;
      while (c < kCategories && open[size_t(c)] == 0) ++c;
      total[size_t(c)] += e.t - prev;
      prev = e.t;
    }
    open[size_t(e.category)] += e.delta;
  }
  total[kCategories] += end_ns - prev;
  return {total[busy], total[communication], total[data], total[checkpoint], total[optimizer], total[kCategories]};
}

}  // namespace

StageTimes stage_times(const std::vector<TraceEvent>& events, int stages, int64_t start_ns, int64_t end_ns) {
  StageTimes out;
  out.start_ns = start_ns;
  out.end_ns = std::max(end_ns, start_ns);
  out.stages.resize(size_t(std::max(stages, 0)));
  int64_t first_forward = INT64_MAX;
  for (const TraceEvent& e : events)
    if (e.kind == EventKind::forward && e.stage >= 0) first_forward = std::min(first_forward, e.start_ns);
  const int64_t data_end = std::clamp(first_forward, out.start_ns, out.end_ns);
  for (int s = 0; s < stages; ++s) {
    std::vector<Edge> edges;
    for (const TraceEvent& e : events) {
      const int c = category_of(e.kind);
      if (c < 0) continue;
      // Stage ops and transfers count on their own stage; host events (stage -1) on every stage.
      if (e.stage >= 0 ? e.stage != s : c == busy || c == communication) continue;
      const int64_t hi = std::min(e.end_ns, c == data ? data_end : out.end_ns);
      const int64_t lo = std::max(e.start_ns, out.start_ns);
      if (hi <= lo) continue;
      edges.push_back({lo, c, +1});
      edges.push_back({hi, c, -1});
    }
    out.stages[size_t(s)] = sweep(edges, out.start_ns, out.end_ns);
  }
  return out;
}

}  // namespace troupe::schedules
