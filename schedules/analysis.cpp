// Statistics and the critical path of one pipeline iteration.
#include "schedules/analysis.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace troupe::schedules {

namespace {

bool is_compute(const TraceEvent& e) { return e.stage >= 0 && is_op_kind(e.kind); }

int stage_count(const Trace& t) {
  int P = std::max(t.header.shape.stages, 1);
  for (const TraceEvent& e : t.events)
    if (is_compute(e)) P = std::max(P, e.stage + 1);
  return P;
}

// Indices of each stage's compute events in start order.
std::vector<std::vector<size_t>> by_stage(const Trace& t) {
  std::vector<std::vector<size_t>> stages(size_t(stage_count(t)));
  for (size_t i = 0; i < t.events.size(); ++i)
    if (is_compute(t.events[i])) stages[size_t(t.events[i].stage)].push_back(i);
  for (auto& idx : stages)
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      return std::tie(t.events[a].start_ns, t.events[a].end_ns) < std::tie(t.events[b].start_ns, t.events[b].end_ns);
    });
  return stages;
}

}  // namespace

PipelineStats pipeline_stats(const Trace& t) {
  PipelineStats s;
  const auto stages = by_stage(t);
  s.stages.resize(stages.size());
  bool any = false;
  for (size_t p = 0; p < stages.size(); ++p) {
    int in_flight = 0;
    for (size_t i : stages[p]) {
      const TraceEvent& e = t.events[i];
      if (!any) s.start_ns = e.start_ns, s.end_ns = e.end_ns, any = true;
      s.start_ns = std::min(s.start_ns, e.start_ns);
      s.end_ns = std::max(s.end_ns, e.end_ns);
      StageStats& st = s.stages[p];
      st.busy_ns += e.end_ns - e.start_ns;
      st.ops += 1;
      // Held from the forward to the backward (a split backward: to its B, which frees most).
      if (e.kind == EventKind::forward) in_flight += 1;
      if (e.kind == EventKind::backward || e.kind == EventKind::backward_input) in_flight -= 1;
      st.peak_in_flight = std::max(st.peak_in_flight, in_flight);
    }
  }
  s.step_ns = s.end_ns - s.start_ns;
  int64_t busy = 0;
  for (StageStats& st : s.stages) {
    st.idle_ns = s.step_ns - st.busy_ns;
    busy += st.busy_ns;
  }
  s.bubble_fraction = s.step_ns > 0 ? 1.0 - double(busy) / (double(s.stages.size()) * double(s.step_ns)) : 0.0;
  return s;
}

std::vector<TraceEvent> critical_path(const Trace& t) {
  const auto stages = by_stage(t);
  const int P = int(stages.size());
  const int V = std::max(t.header.shape.chunks, 1);
  int K = P * V;
  std::map<std::tuple<int, int, int>, size_t> op_at;  // (kind, virtual stage, microbatch) -> event
  std::vector<long> prev(t.events.size(), -1);        // previous op on the same stage
  size_t last = t.events.size();
  for (const auto& idx : stages) {
    for (size_t j = 0; j < idx.size(); ++j) {
      const TraceEvent& e = t.events[idx[j]];
      const int k = e.chunk * P + e.stage;
      K = std::max(K, k + 1);
      op_at[{int(e.kind), k, e.microbatch}] = idx[j];
      if (j > 0) prev[idx[j]] = long(idx[j - 1]);
      if (last == t.events.size() || e.end_ns > t.events[last].end_ns) last = idx[j];
    }
  }
  std::vector<TraceEvent> path;
  if (last == t.events.size()) return path;
  auto find = [&](EventKind kind, int k, int mb) -> long {
    auto it = op_at.find({int(kind), k, mb});
    return it == op_at.end() ? -1 : long(it->second);
  };
  for (long cur = long(last); cur >= 0;) {
    const TraceEvent& e = t.events[size_t(cur)];
    path.push_back(e);
    const int k = e.chunk * P + e.stage;
    long data = -1;
    if (e.kind == EventKind::forward)
      data = k > 0 ? find(EventKind::forward, k - 1, e.microbatch) : -1;
    else if (e.kind == EventKind::backward_weight)
      data = find(EventKind::backward_input, k, e.microbatch);  // a W needs its own B
    else if (k + 1 == K)
      data = find(EventKind::forward, k, e.microbatch);
    else  // the next virtual stage's fused backward or B sent the gradient
      data = std::max(find(EventKind::backward, k + 1, e.microbatch),
                      find(EventKind::backward_input, k + 1, e.microbatch));
    long best = -1;
    for (long dep : {prev[size_t(cur)], data})
      if (dep >= 0 && t.events[size_t(dep)].end_ns <= e.start_ns &&
          (best < 0 || t.events[size_t(dep)].end_ns > t.events[size_t(best)].end_ns))
        best = dep;
    cur = best;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<std::vector<Op>> stage_orders(const Trace& t) {
  const auto stages = by_stage(t);
  std::vector<std::vector<Op>> orders(stages.size());
  for (size_t p = 0; p < stages.size(); ++p)
    for (size_t i : stages[p]) {
      const TraceEvent& e = t.events[i];
      orders[p].push_back({op_kind(e.kind), e.microbatch, e.chunk});
    }
  return orders;
}

}  // namespace troupe::schedules
