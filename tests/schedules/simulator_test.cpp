// The simulator against theory: bubble fractions, step times, activation memory, the
// critical path, and robustness of the stage policies to uneven op times.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <tuple>

#include "base/check.hpp"
#include "schedules/analysis.hpp"
#include "schedules/simulator.hpp"

namespace troupe::schedules {
namespace {

std::vector<std::pair<Schedule, PipelineShape>> valid_shapes() {
  std::vector<std::pair<Schedule, PipelineShape>> out;
  for (int P : {1, 2, 3, 4, 8})
    for (int M = 1; M <= 16; ++M) {
      out.push_back({Schedule::gpipe, {.stages = P, .chunks = 1, .microbatches = M}});
      out.push_back({Schedule::one_f_one_b, {.stages = P, .chunks = 1, .microbatches = M}});
      for (int V : {1, 2, 3})
        for (int G : {0, P + 1}) {
          const PipelineShape shape{.stages = P, .chunks = V, .microbatches = M, .group_size = G};
          try {
            validate(Schedule::interleaved_1f1b, shape);
          } catch (const Error&) {
            continue;
          }
          out.push_back({Schedule::interleaved_1f1b, shape});
        }
    }
  return out;
}

std::string shape_str(Schedule sch, const PipelineShape& s) {
  return str_cat(schedule_name(sch), " P=", s.stages, " V=", s.chunks, " M=", s.microbatches, " G=", group_size(s));
}

// Bubble = idle share of P x step time. With a forward and a backward of a whole stage taking
// tf and tb (a chunk: tf/V, tb/V) and free P2P, Megatron's analysis gives
// step = (M + P - 1)(tf + tb) for GPipe and 1F1B, (M + (P-1)/V)(tf + tb) for interleaving,
// so bubble = (P-1)/(M+P-1) and (P-1)/(V*M+P-1). The simulator matches both exactly, for
// tb = tf and tb = 2 tf, for every group size tried (not only G = P).
TEST(Simulator, BubbleMatchesTheory) {
  for (const auto& [sch, shape] : valid_shapes())
    for (int64_t tb_ratio : {1, 2}) {
      const int V = shape.chunks;
      const int64_t tf = 6 * 3, tb = tf * tb_ratio;  // divisible by V = 1, 2, 3
      const Simulation sim = simulate(sch, shape, OpDurations::uniform(shape, tf / V, tb / V));
      const double P = shape.stages, M = shape.microbatches;
      const double expected_step =
          sch == Schedule::interleaved_1f1b ? (M + (P - 1) / V) * double(tf + tb) : (M + P - 1) * double(tf + tb);
      EXPECT_DOUBLE_EQ(double(sim.stats.step_ns), expected_step) << shape_str(sch, shape) << " tb/tf " << tb_ratio;
      EXPECT_NEAR(sim.stats.bubble_fraction, theoretical_bubble(sch, shape), 1e-12) << shape_str(sch, shape);
      for (const StageStats& st : sim.stats.stages) EXPECT_EQ(st.busy_ns, int64_t(M) * (tf + tb));
    }
}

TEST(Simulator, TheoryFormulas) {
  EXPECT_DOUBLE_EQ(theoretical_bubble(Schedule::one_f_one_b, {.stages = 4, .chunks = 1, .microbatches = 8}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(theoretical_bubble(Schedule::gpipe, {.stages = 4, .chunks = 1, .microbatches = 8}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(theoretical_bubble(Schedule::interleaved_1f1b, {.stages = 4, .chunks = 2, .microbatches = 8}),
                   3.0 / 19);
}

// Activation memory: the most forwards held before their backward.
TEST(Simulator, PeakInFlight) {
  for (const auto& [sch, shape] : valid_shapes()) {
    const Simulation sim = simulate(sch, shape, OpDurations::uniform(shape, 10, 20));
    for (int s = 0; s < shape.stages; ++s) {
      const int peak = sim.stats.stages[size_t(s)].peak_in_flight;
      if (sch == Schedule::gpipe)
        EXPECT_EQ(peak, shape.microbatches);
      else
        EXPECT_EQ(peak, max_in_flight(sch, shape, s)) << shape_str(sch, shape) << " stage " << s;
    }
    if (sch == Schedule::one_f_one_b) {
      EXPECT_EQ(sim.stats.stages[0].peak_in_flight, std::min(shape.stages, shape.microbatches));
    }
  }
}

// Uneven op times, P2P latency: no deadlock, every op exactly once, each kind in schedule
// order; constant op times with a latency and tb = 2 tf still give the canonical order.
TEST(Simulator, UnevenTimesStillRunEveryOpOnce) {
  std::mt19937 rng(7);
  for (const auto& [sch, shape] : valid_shapes()) {
    OpDurations d = OpDurations::uniform(shape, 0, 0, int64_t(rng() % 30));
    for (auto& row : d.forward_ns)
      for (auto& t : row) t = 1 + int64_t(rng() % 100);
    for (auto& row : d.backward_ns)
      for (auto& t : row) t = 1 + int64_t(rng() % 200);
    const Simulation sim = simulate(sch, shape, d);
    for (int s = 0; s < shape.stages; ++s) {
      const auto& order = sim.order[size_t(s)];
      ASSERT_EQ(order.size(), size_t(2 * shape.microbatches * shape.chunks)) << shape_str(sch, shape);
      std::vector<Op> fwd, bwd;
      for (const Op& op : order) (op.kind == OpKind::forward ? fwd : bwd).push_back(op);
      EXPECT_EQ(fwd, forward_order(sch, shape, s)) << shape_str(sch, shape);
      EXPECT_EQ(bwd, backward_order(sch, shape, s)) << shape_str(sch, shape);
    }
    const Simulation lat = simulate(sch, shape, OpDurations::uniform(shape, 10, 20, 3));
    for (int s = 0; s < shape.stages; ++s)
      EXPECT_EQ(lat.order[size_t(s)], canonical_order(sch, shape, s)) << shape_str(sch, shape) << " stage " << s;
  }
}

TEST(Simulator, TraceAndStagesAgree) {
  const PipelineShape shape{.stages = 3, .chunks = 1, .microbatches = 4};
  const Simulation sim = simulate(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 10, 20, 5));
  EXPECT_EQ(sim.trace.events.size(), size_t(3 * 2 * 4));
  EXPECT_EQ(stage_orders(sim.trace), sim.order);
  for (const TraceEvent& e : sim.trace.events) {
    EXPECT_EQ(e.actor, str_cat("stage", e.stage));
    EXPECT_EQ(e.end_ns - e.start_ns, e.kind == EventKind::forward ? 10 : 20);
  }
  // The first stage starts at 0; the last op is stage 0's last backward.
  EXPECT_EQ(sim.stats.start_ns, 0);
  // P2P latency at least lengthens fill and drain by 2 (P-1) transfers; in the steady state a
  // stage also waits for round trips, so the step is longer still: the critical path then
  // holds ops and whole transfers only.
  EXPECT_GE(sim.stats.step_ns, (4 + 2) * 30 + 2 * 2 * 5);
  int64_t compute = 0;
  const auto path = critical_path(sim.trace);
  for (const TraceEvent& e : path) compute += e.end_ns - e.start_ns;
  EXPECT_EQ(path.back().end_ns - path.front().start_ns, sim.stats.step_ns);
  EXPECT_GT(sim.stats.step_ns, compute);
  EXPECT_EQ((sim.stats.step_ns - compute) % 5, 0);
}

TEST(Simulator, RejectsBadDurations) {
  const PipelineShape shape{.stages = 2, .chunks = 1, .microbatches = 2};
  EXPECT_THROW(simulate(Schedule::one_f_one_b, shape, OpDurations::uniform({.stages = 3}, 1, 1)), Error);
  EXPECT_THROW(simulate(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, -1, 1)), Error);
  EXPECT_THROW(
      simulate(Schedule::one_f_one_b, {.stages = 2, .chunks = 2, .microbatches = 2}, OpDurations::uniform(shape, 1, 1)),
      Error);
}

// With equal times and free P2P the critical path has no gaps: it is a chain of ops, each
// starting when its predecessor ends, from the first forward to the last backward.
TEST(CriticalPath, ChainsFromFirstForwardToLastBackward) {
  for (const auto& [sch, shape] : valid_shapes()) {
    const Simulation sim = simulate(sch, shape, OpDurations::uniform(shape, 10, 20));
    const std::vector<TraceEvent> path = critical_path(sim.trace);
    ASSERT_FALSE(path.empty());
    EXPECT_EQ(path.front().start_ns, 0);
    EXPECT_EQ(path.back().end_ns, sim.stats.end_ns);
    for (size_t i = 1; i < path.size(); ++i)
      ASSERT_EQ(path[i].start_ns, path[i - 1].end_ns) << shape_str(sch, shape) << " hop " << i;
    EXPECT_EQ(path.front().kind, EventKind::forward);
    EXPECT_EQ(path.back().kind, EventKind::backward);
    EXPECT_EQ(path.back().stage, 0);
  }
  // 1F1B, P=2, M=2, tf=10, tb=20: s0 F0 -> s1 F0 -> s1 B0 -> s1 F1 -> s1 B1 -> s0 B1.
  const PipelineShape shape{.stages = 2, .chunks = 1, .microbatches = 2};
  const Simulation sim = simulate(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 10, 20));
  std::string chain;
  for (const TraceEvent& e : critical_path(sim.trace))
    chain += str_cat(" s", e.stage, e.kind == EventKind::forward ? "F" : "B", e.microbatch);
  EXPECT_EQ(chain, " s0F0 s1F0 s1B0 s1F1 s1B1 s0B1");
}

// A waiting gap (P2P latency) is crossed through the data dependency.
TEST(CriticalPath, FollowsTransfers) {
  const PipelineShape shape{.stages = 2, .chunks = 1, .microbatches = 1};
  const Simulation sim = simulate(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 10, 20, 7));
  const auto path = critical_path(sim.trace);
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(path[1].start_ns - path[0].end_ns, 7);
  EXPECT_EQ(path[3].start_ns - path[2].end_ns, 7);
}

}  // namespace
}  // namespace troupe::schedules
