// A discrete-event simulator of one pipeline iteration: each stage runs its ops one at a
// time under its StagePolicy, with given per-op durations and P2P latencies (one per edge
// between virtual stages and direction, or one for all), and messages flow as in the real
// pipeline (placement(): chunks in a loop, or zb_v's V): the forward output of virtual stage k
// feeds virtual stage k+1, the input gradient of k feeds k-1 (free between two chunks of one
// stage), and the last virtual stage's forward enables its own backward. A schedule that
// splits backward (zb_h1, zb_v) runs each backward as B, which sends
// the gradient on, and W, which sends nothing (splits_backward()). Ops that become ready at the same instant are all
// seen before any idle stage decides, so equal durations give a deterministic, tie-free answer.
//
//   OpDurations d = OpDurations::uniform(shape, /*forward=*/1000, /*backward=*/2000);
//   Simulation sim = simulate(Schedule::one_f_one_b, shape, d);
//   sim.stats.step_ns, sim.stats.bubble_fraction, sim.order[stage] == canonical_order(...)
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/analysis.hpp"
#include "schedules/schedule.hpp"
#include "schedules/trace.hpp"

namespace troupe::schedules {

struct OpDurations {
  std::vector<std::vector<int64_t>> forward_ns;   // (P, V): one forward of chunk c on stage s
  std::vector<std::vector<int64_t>> backward_ns;  // (P, V): the whole backward, B + W
  // (P, V) or empty: the weight-gradient part (W) of backward_ns, for schedules that split it;
  // B takes the rest. Empty: W = B = half of backward_ns (the assumption when only a fused
  // backward was measured: the weight gradient's matmuls match the input gradient's in FLOPs).
  std::vector<std::vector<int64_t>> weight_ns;
  int64_t p2p_ns = 0;  // one activation or gradient transfer between stages
  // Per edge, when they differ (a link between processes is slower than one in a process):
  // entry k is the transfer between virtual stages k and k+1 (K-1 entries); empty: p2p_ns.
  std::vector<int64_t> activation_p2p_ns;  // forward output of k -> forward input of k+1
  std::vector<int64_t> gradient_p2p_ns;    // input gradient of k+1 -> backward of k
  // (P) or empty: after an op ends, stage s starts no other for dispatch_ns[s] (the runtime's
  // turnaround between ops; idle time, not busy).
  std::vector<int64_t> dispatch_ns;

  int64_t activation_latency(int k) const { return activation_p2p_ns.empty() ? p2p_ns : activation_p2p_ns[size_t(k)]; }
  int64_t gradient_latency(int k) const { return gradient_p2p_ns.empty() ? p2p_ns : gradient_p2p_ns[size_t(k)]; }
  // W and B of a split backward of chunk c on stage s (weight_ns, or half of backward_ns).
  int64_t weight_grad(int s, int c) const {
    return weight_ns.empty() ? backward_ns[size_t(s)][size_t(c)] / 2 : weight_ns[size_t(s)][size_t(c)];
  }
  int64_t input_grad(int s, int c) const { return backward_ns[size_t(s)][size_t(c)] - weight_grad(s, c); }
  // The time of `op` on stage s: forward, fused backward, B or W.
  int64_t op_ns(int s, const Op& op) const;

  static OpDurations uniform(const PipelineShape& shape, int64_t forward_ns, int64_t backward_ns, int64_t p2p_ns = 0);
};

struct Simulation {
  std::vector<std::vector<Op>> order;  // per stage, the ops in the order they ran
  Trace trace;                         // op events (forward, backward, B, W), actor "stage<s>", device s, iteration 0
  PipelineStats stats;                 // step time, bubble, busy/idle, peak in-flight
};

// Throws troupe::Error on an impossible shape, durations of the wrong size, or a deadlock
// (a policy waiting for an op that can never become ready).
Simulation simulate(Schedule schedule, const PipelineShape& shape, const OpDurations& durations);

}  // namespace troupe::schedules
