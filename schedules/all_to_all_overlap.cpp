#include "schedules/all_to_all_overlap.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace troupe::schedules {

namespace {

using Interval = std::pair<int64_t, int64_t>;

// The length of [lo, hi] that the union of `cover` spans.
int64_t covered_length(int64_t lo, int64_t hi, std::vector<Interval> cover) {
  std::sort(cover.begin(), cover.end());
  int64_t sum = 0, at = lo;
  for (const auto& [a, b] : cover) {
    const int64_t from = std::max(a, at), to = std::min(b, hi);
    if (from < to) {
      sum += to - from;
      at = to;
    }
  }
  return sum;
}

}  // namespace

AllToAllOverlap all_to_all_overlap(const std::vector<TraceEvent>& events, const std::vector<int64_t>& iterations) {
  const std::set<int64_t> wanted(iterations.begin(), iterations.end());
  // The spans of one op: (stage, iteration, microbatch, chunk) and the op kind's family
  // (forward or backward: both carry the same microbatch and chunk).
  using OpKey = std::tuple<int, int64_t, int, int, bool>;
  std::map<OpKey, std::vector<std::pair<int64_t, int64_t>>> overlapped;
  std::vector<const TraceEvent*> exchanges;
  std::set<int64_t> seen_iterations;
  std::set<int> stages;
  // Spans carry no op kind: an op's spans lie inside it, so the forward and the backward of one
  // microbatch are told apart by which op of the stage contains them.
  std::map<std::tuple<int, int64_t, int, int>, std::vector<const TraceEvent*>> ops;
  for (const TraceEvent& e : events) {
    if (!wanted.empty() && wanted.count(e.iteration) == 0) continue;
    if (is_op_kind(e.kind)) ops[{e.stage, e.iteration, e.microbatch, e.chunk}].push_back(&e);
  }
  auto key_of = [&](const TraceEvent& e) -> OpKey {
    bool forward = false;
    const auto it = ops.find({e.stage, e.iteration, e.microbatch, e.chunk});
    if (it != ops.end())
      for (const TraceEvent* op : it->second)
        if (op->start_ns <= e.start_ns && e.end_ns <= op->end_ns) forward = op->kind == EventKind::forward;
    return {e.stage, e.iteration, e.microbatch, e.chunk, forward};
  };
  std::map<int, std::vector<const TraceEvent*>> stage_ops;  // every op of each stage
  for (const auto& [where, list] : ops) {
    std::vector<const TraceEvent*>& all = stage_ops[std::get<0>(where)];
    all.insert(all.end(), list.begin(), list.end());
  }
  AllToAllOverlap out;
  for (const TraceEvent& e : events) {
    if (!wanted.empty() && wanted.count(e.iteration) == 0) continue;
    if (e.kind == EventKind::moe_overlap) {
      overlapped[key_of(e)].push_back({e.start_ns, e.end_ns});
      out.overlap_ns += e.end_ns - e.start_ns;
    } else if (e.kind == EventKind::moe_dispatch || e.kind == EventKind::moe_combine) {
      exchanges.push_back(&e);
      seen_iterations.insert(e.iteration);
      stages.insert(e.stage);
    }
  }
  for (const TraceEvent* e : exchanges) {
    ++out.spans;
    (e->kind == EventKind::moe_dispatch ? out.dispatch_ns : out.combine_ns) += e->end_ns - e->start_ns;
    const OpKey key = key_of(*e);
    std::vector<Interval> own, others;
    if (const auto it = overlapped.find(key); it != overlapped.end()) own = it->second;
    // Every other op of the stage, any microbatch (the op holding the exchange left out).
    for (const TraceEvent* op : stage_ops[e->stage])
      if (std::tuple(op->stage, op->iteration, op->microbatch, op->chunk, op->kind == EventKind::forward) != key)
        others.push_back({op->start_ns, op->end_ns});
    out.hidden_ns += covered_length(e->start_ns, e->end_ns, own);
    out.beside_ns += covered_length(e->start_ns, e->end_ns, others);
    own.insert(own.end(), others.begin(), others.end());
    out.covered_ns += covered_length(e->start_ns, e->end_ns, own);
  }
  out.iterations = int(seen_iterations.size());
  out.stages = int(stages.size());
  return out;
}

}  // namespace troupe::schedules
