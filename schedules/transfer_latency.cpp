// Transfer latencies between virtual stages and the stages' turnaround between ops, from recv
// events or from the gaps between the ops of a trace.
#include "schedules/transfer_latency.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

namespace troupe::schedules {

namespace {

bool is_compute(const TraceEvent& e) { return e.stage >= 0 && is_op_kind(e.kind); }

int64_t lower_quartile(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 4];
}

int64_t mean(const std::vector<int64_t>& v) {
  double sum = 0;
  for (int64_t x : v) sum += double(x);
  return std::llround(sum / double(v.size()));
}

// The mean without the longest tenth.
int64_t trimmed_mean(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  v.resize(v.size() - v.size() / 10);
  return mean(v);
}

struct Samples {
  // [direction][link]: 0 up (s -> s+1), 1 down (s+1 -> s); transfer_link().
  std::vector<std::vector<int64_t>> gaps[2], recvs[2];
  std::vector<std::vector<int64_t>> dispatch;  // [stage]
};

class IterationOps {
 public:
  IterationOps(const std::vector<const TraceEvent*>& events, const TraceHeader& header)
      : header_(header), K_(header.shape.stages * header.shape.chunks), stages_(size_t(header.shape.stages)) {
    for (const TraceEvent* e : events) {
      if (!is_compute(*e) || e->stage >= header.shape.stages || e->chunk < 0 || e->chunk >= header.shape.chunks)
        continue;
      op_at_[{int(e->kind), virtual_stage_of(*e), e->microbatch}] = e;
      stages_[size_t(e->stage)].push_back(e);
    }
    for (auto& ops : stages_)
      std::stable_sort(ops.begin(), ops.end(),
                       [](const TraceEvent* a, const TraceEvent* b) { return a->start_ns < b->start_ns; });
  }
  const TraceEvent* find(EventKind kind, int k, int mb) const {
    auto it = op_at_.find({int(kind), k, mb});
    return it == op_at_.end() ? nullptr : it->second;
  }
  // The op of another stage whose output `e` reads; null for the first virtual stage's forward
  // and the last one's backward (its input is its own forward's).
  int virtual_stage_of(const TraceEvent& e) const {
    return virtual_stage(header_.schedule, header_.shape, e.stage, e.chunk);
  }
  const TraceEvent* producer(const TraceEvent& e) const {
    const int k = virtual_stage_of(e);
    if (e.kind == EventKind::forward) return k > 0 ? find(EventKind::forward, k - 1, e.microbatch) : nullptr;
    if (e.kind == EventKind::backward_weight || k + 1 >= K_) return nullptr;  // a W reads its own B's stage
    const TraceEvent* fused = find(EventKind::backward, k + 1, e.microbatch);
    return fused != nullptr ? fused : find(EventKind::backward_input, k + 1, e.microbatch);
  }
  const std::vector<std::vector<const TraceEvent*>>& stages() const { return stages_; }

 private:
  const TraceHeader& header_;
  int K_;
  std::map<std::tuple<int, int, int>, const TraceEvent*> op_at_;  // (kind, virtual stage, microbatch)
  std::vector<std::vector<const TraceEvent*>> stages_;            // each in start order
};

}  // namespace

TransferLatencies measured_transfer_latencies(const Trace& trace, const std::vector<int64_t>& iterations) {
  TraceHeader header = trace.header;
  header.shape.stages = std::max(header.shape.stages, 1);
  header.shape.chunks = std::max(header.shape.chunks, 1);
  const int P = header.shape.stages, K = P * header.shape.chunks;
  const Placement where = placement(header.schedule);
  Samples s;
  for (int d = 0; d < 2; ++d) s.gaps[d].resize(size_t(P)), s.recvs[d].resize(size_t(P));
  s.dispatch.resize(size_t(P));
  TransferLatencies out;
  out.smallest_gap_ns = INT64_MAX;

  const std::set<int64_t> wanted(iterations.begin(), iterations.end());
  std::map<int64_t, std::vector<const TraceEvent*>> by_iteration;
  for (const TraceEvent& e : trace.events)
    if (wanted.empty() || wanted.count(e.iteration)) by_iteration[e.iteration].push_back(&e);

  for (const auto& [iteration, events] : by_iteration) {
    const IterationOps ops(events, header);
    // recv events: the receiving stage's (microbatch, chunk); a gradient if it began after that
    // chunk's forward of the microbatch ended (the gradient cannot be produced before).
    for (const TraceEvent* e : events) {
      if (e->kind != EventKind::recv || e->stage < 0 || e->stage >= P || e->chunk < 0 ||
          e->chunk >= header.shape.chunks)
        continue;
      const int k = ops.virtual_stage_of(*e);
      const TraceEvent* fwd = ops.find(EventKind::forward, k, e->microbatch);
      const bool gradient = fwd != nullptr && e->start_ns >= fwd->end_ns;
      const int edge = gradient ? k : k - 1;
      if (edge < 0 || edge >= K - 1) continue;
      // A receive posted before its producer ended (across processes it waits on the device for
      // the sender) counts from that end: the time it waited for the op is not the transfer's.
      TraceEvent as_op = *e;
      as_op.kind = gradient ? EventKind::backward : EventKind::forward;
      const TraceEvent* from = ops.producer(as_op);
      const int64_t begin = from != nullptr ? std::max(e->start_ns, from->end_ns) : e->start_ns;
      const Link l = transfer_link(where, header.shape, edge, gradient);
      if (l.link < 0) continue;
      s.recvs[l.up ? 0 : 1][size_t(l.link)].push_back(std::max<int64_t>(e->end_ns - begin, 0));
    }
    for (const auto& stage_ops : ops.stages()) {
      int64_t free_since = INT64_MIN;  // the end of the stage's previous op
      for (const TraceEvent* e : stage_ops) {
        const int k = ops.virtual_stage_of(*e);
        const bool forward = e->kind == EventKind::forward;
        const TraceEvent* producer = ops.producer(*e);
        const int64_t gap = producer != nullptr ? e->start_ns - producer->end_ns : 0;
        if (producer != nullptr) out.smallest_gap_ns = std::min(out.smallest_gap_ns, gap);
        if (free_since != INT64_MIN) {
          if (producer != nullptr && e->start_ns > free_since && producer->end_ns >= free_since && gap >= 0) {
            // The stage was idle and the input came last: the op waited for exactly this transfer.
            const Link l = transfer_link(where, header.shape, forward ? k - 1 : k, !forward);
            if (l.link >= 0) s.gaps[l.up ? 0 : 1][size_t(l.link)].push_back(gap);
          } else if (producer == nullptr || producer->end_ns < free_since) {
            s.dispatch[size_t(e->stage)].push_back(std::max<int64_t>(e->start_ns - free_since, 0));
          }
        }
        free_since = std::max(free_since, e->end_ns);
      }
    }
  }
  if (out.smallest_gap_ns == INT64_MAX) out.smallest_gap_ns = 0;
  std::vector<int64_t> link[2];  // [up, down][link]
  for (int d = 0; d < 2; ++d) {
    link[d].assign(size_t(P), -1);
    for (size_t l = 0; l < size_t(P); ++l) {
      if (!s.recvs[d][l].empty()) {
        link[d][l] = mean(s.recvs[d][l]);
        out.samples += int(s.recvs[d][l].size());
      } else if (!s.gaps[d][l].empty()) {
        link[d][l] = lower_quartile(s.gaps[d][l]);
        out.samples += int(s.gaps[d][l].size());
      }
    }
  }
  for (int k = 0; k + 1 < K; ++k) {
    for (const bool gradient : {false, true}) {
      const Link l = transfer_link(where, header.shape, k, gradient);
      (gradient ? out.gradient_ns : out.activation_ns).push_back(l.link < 0 ? 0 : link[l.up ? 0 : 1][size_t(l.link)]);
    }
  }
  for (const auto& gaps : s.dispatch) out.dispatch_ns.push_back(gaps.empty() ? 0 : trimmed_mean(gaps));
  return out;
}

}  // namespace troupe::schedules
