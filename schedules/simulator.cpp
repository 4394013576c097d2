// Discrete-event simulation of one pipeline iteration under the stage policies.
#include "schedules/simulator.hpp"

#include <queue>

#include "base/check.hpp"

namespace troupe::schedules {

OpDurations OpDurations::uniform(const PipelineShape& shape, int64_t forward_ns, int64_t backward_ns, int64_t p2p_ns) {
  OpDurations d;
  d.forward_ns.assign(size_t(shape.stages), std::vector<int64_t>(size_t(shape.chunks), forward_ns));
  d.backward_ns.assign(size_t(shape.stages), std::vector<int64_t>(size_t(shape.chunks), backward_ns));
  d.p2p_ns = p2p_ns;
  return d;
}

int64_t OpDurations::op_ns(int s, const Op& op) const {
  switch (op.kind) {
    case OpKind::forward:
      return forward_ns[size_t(s)][size_t(op.chunk)];
    case OpKind::backward:
      return backward_ns[size_t(s)][size_t(op.chunk)];
    case OpKind::backward_input:
      return input_grad(s, op.chunk);
    case OpKind::backward_weight:
      return weight_grad(s, op.chunk);
  }
  return 0;
}

namespace {

struct Event {
  int64_t time;
  int64_t seq;  // FIFO among equal times, for determinism
  enum Type { op_done, activation_arrives, gradient_arrives, stage_free } type;
  int stage;          // op_done, stage_free: the stage
  int virtual_stage;  // arrivals: the receiving virtual stage
  int microbatch;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

}  // namespace

Simulation simulate(Schedule schedule, const PipelineShape& shape, const OpDurations& durations) {
  validate(schedule, shape);
  const int P = shape.stages, V = shape.chunks, M = shape.microbatches, K = P * V;
  TROUPE_CHECK(durations.forward_ns.size() == size_t(P) && durations.backward_ns.size() == size_t(P),
               "simulate: durations for ", durations.forward_ns.size(), " stages, the pipeline has ", P);
  for (int s = 0; s < P; ++s) {
    TROUPE_CHECK(
        durations.forward_ns[size_t(s)].size() == size_t(V) && durations.backward_ns[size_t(s)].size() == size_t(V),
        "simulate: stage ", s, " has durations for ", durations.forward_ns[size_t(s)].size(),
        " chunks, the pipeline has ", V);
    for (int c = 0; c < V; ++c)
      TROUPE_CHECK(durations.forward_ns[size_t(s)][size_t(c)] >= 0 && durations.backward_ns[size_t(s)][size_t(c)] >= 0,
                   "simulate: negative op duration on stage ", s, " chunk ", c);
  }
  TROUPE_CHECK(durations.weight_ns.empty() || durations.weight_ns.size() == size_t(P), "simulate: weight-gradient ",
               "durations for ", durations.weight_ns.size(), " stages, the pipeline has ", P);
  for (size_t s = 0; s < durations.weight_ns.size(); ++s) {
    TROUPE_CHECK(durations.weight_ns[s].size() == size_t(V), "simulate: stage ", s,
                 " has weight-gradient durations for ", durations.weight_ns[s].size(), " chunks, the pipeline has ", V);
    for (int c = 0; c < V; ++c)
      TROUPE_CHECK(durations.weight_ns[s][size_t(c)] >= 0 &&
                       durations.weight_ns[s][size_t(c)] <= durations.backward_ns[s][size_t(c)],
                   "simulate: the weight gradient of stage ", s, " chunk ", c, " is outside [0, its backward]");
  }
  TROUPE_CHECK(durations.p2p_ns >= 0, "simulate: negative P2P latency");
  for (const auto* edges : {&durations.activation_p2p_ns, &durations.gradient_p2p_ns}) {
    TROUPE_CHECK(edges->empty() || edges->size() == size_t(K - 1), "simulate: ", edges->size(),
                 " per-edge P2P latencies, the pipeline has ", K - 1, " edges between its ", K, " virtual stages");
    for (int64_t ns : *edges) TROUPE_CHECK(ns >= 0, "simulate: negative P2P latency on an edge");
  }
  TROUPE_CHECK(durations.dispatch_ns.empty() || durations.dispatch_ns.size() == size_t(P),
               "simulate: ", durations.dispatch_ns.size(), " dispatch times for ", P, " stages");
  for (int64_t ns : durations.dispatch_ns) TROUPE_CHECK(ns >= 0, "simulate: negative dispatch time");

  // Inputs that have arrived, per virtual stage and microbatch.
  std::vector<std::vector<char>> activation(size_t(K), std::vector<char>(size_t(M), 0));
  std::vector<std::vector<char>> gradient(size_t(K), std::vector<char>(size_t(M), 0));
  activation[0].assign(size_t(M), 1);  // the data loader feeds every microbatch up front

  std::vector<StagePolicy> policies;
  for (int s = 0; s < P; ++s) policies.emplace_back(schedule, shape, s);
  std::vector<std::optional<Op>> running(static_cast<size_t>(P));
  std::vector<char> turning(size_t(P), 0);  // between ops: dispatch_ns after the last one ended
  std::vector<int64_t> started(size_t(P), 0);

  Simulation sim;
  sim.order.resize(size_t(P));
  sim.trace.header.schedule = schedule;
  sim.trace.header.shape = shape;

  // A hop between two chunks of one stage (zb_v's turn) is no transfer.
  auto local = [&](int k) { return transfer_link(placement(schedule), shape, k, false).link < 0; };
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue;
  int64_t seq = 0, now = 0;
  auto decide = [&](int s) {
    auto is_ready = [&](const Op& op) {
      const int k = virtual_stage(schedule, shape, s, op.chunk);
      if (op.kind == OpKind::backward_weight) return true;  // the policy runs it after its B
      return op.kind == OpKind::forward ? activation[size_t(k)][size_t(op.microbatch)] != 0
                                        : gradient[size_t(k)][size_t(op.microbatch)] != 0;
    };
    std::optional<Op> op = policies[size_t(s)].next(is_ready);
    if (!op) return;
    running[size_t(s)] = op;
    started[size_t(s)] = now;
    queue.push({now + durations.op_ns(s, *op), seq++, Event::op_done, s, 0, 0});
  };
  for (int s = 0; s < P; ++s) decide(s);

  while (!queue.empty()) {
    now = queue.top().time;
    while (!queue.empty() && queue.top().time == now) {
      const Event e = queue.top();
      queue.pop();
      if (e.type == Event::activation_arrives) {
        activation[size_t(e.virtual_stage)][size_t(e.microbatch)] = 1;
        continue;
      }
      if (e.type == Event::gradient_arrives) {
        gradient[size_t(e.virtual_stage)][size_t(e.microbatch)] = 1;
        continue;
      }
      if (e.type == Event::stage_free) {
        turning[size_t(e.stage)] = 0;
        continue;
      }
      const Op op = *running[size_t(e.stage)];
      running[size_t(e.stage)].reset();
      const int64_t dispatch = durations.dispatch_ns.empty() ? 0 : durations.dispatch_ns[size_t(e.stage)];
      if (dispatch > 0) {
        turning[size_t(e.stage)] = 1;
        queue.push({now + dispatch, seq++, Event::stage_free, e.stage, 0, 0});
      }
      sim.order[size_t(e.stage)].push_back(op);
      TraceEvent ev;
      ev.actor = str_cat("stage", e.stage);
      ev.device = ev.stage = e.stage;
      ev.kind = event_kind(op.kind);
      ev.microbatch = op.microbatch;
      ev.chunk = op.chunk;
      ev.start_ns = started[size_t(e.stage)];
      ev.end_ns = now;
      sim.trace.events.push_back(ev);
      const int k = virtual_stage(schedule, shape, e.stage, op.chunk);
      if (op.kind == OpKind::forward) {
        if (k + 1 < K)
          queue.push({now + (local(k) ? 0 : durations.activation_latency(k)), seq++, Event::activation_arrives, -1,
                      k + 1, op.microbatch});
        else
          gradient[size_t(k)][size_t(op.microbatch)] = 1;        // the loss is computed here
      } else if (k > 0 && op.kind != OpKind::backward_weight) {  // a W sends nothing
        queue.push({now + (local(k - 1) ? 0 : durations.gradient_latency(k - 1)), seq++, Event::gradient_arrives, -1,
                    k - 1, op.microbatch});
      }
    }
    for (int s = 0; s < P; ++s)
      if (!running[size_t(s)] && !turning[size_t(s)]) decide(s);
  }
  for (int s = 0; s < P; ++s) {
    if (policies[size_t(s)].done()) continue;
    std::string seen;
    for (const Op& op : sim.order[size_t(s)]) seen += op_str(op) + " ";
    TROUPE_FAIL("simulate: deadlock on stage ", s, " of ", schedule_name(schedule), " P=", P, " V=", V, " M=", M,
                " after ops: ", seen, "(in flight ", policies[size_t(s)].in_flight(), " of ",
                policies[size_t(s)].max_in_flight(), ")");
  }
  sim.stats = pipeline_stats(sim.trace);
  return sim;
}

}  // namespace troupe::schedules
