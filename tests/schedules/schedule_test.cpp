// Canonical op orders against Megatron-LM's schedules, the constraints validate() enforces,
// and the key property of the stage policy: under equal op durations, the order that
// emerges in the simulator is exactly the canonical order, for many (P, V, M).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/check.hpp"
#include "schedules/schedule.hpp"
#include "schedules/simulator.hpp"

namespace troupe::schedules {
namespace {

std::string order_str(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) {
    if (!s.empty()) s += ' ';
    s += op_str(op);
  }
  return s;
}

// Short form for V = 1: "F0 F1 B0 ...".
std::string short_str(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) s += str_cat(s.empty() ? "" : " ", op.kind == OpKind::forward ? "F" : "B", op.microbatch);
  return s;
}

TEST(ScheduleTable, MatchesMegatronExample) {
  // megatron/core/pipeline_parallel/schedules.py: PP2 N3M5 VP2.
  const std::vector<Op> table = schedule_table(5, 2, 3);
  std::vector<int> mb, chunk;
  for (const Op& op : table) mb.push_back(op.microbatch), chunk.push_back(op.chunk);
  EXPECT_EQ(mb, (std::vector<int>{0, 1, 2, 0, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(chunk, (std::vector<int>{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}));
}

TEST(CanonicalOrder, GPipe) {
  const PipelineShape shape{.stages = 3, .chunks = 1, .microbatches = 3};
  for (int s = 0; s < 3; ++s) EXPECT_EQ(short_str(canonical_order(Schedule::gpipe, shape, s)), "F0 F1 F2 B0 B1 B2");
}

TEST(CanonicalOrder, OneFOneB) {
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 6};
  // Warmup P-s-1 forwards, steady F/B pairs, cooldown backwards.
  EXPECT_EQ(short_str(canonical_order(Schedule::one_f_one_b, shape, 0)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(short_str(canonical_order(Schedule::one_f_one_b, shape, 2)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(short_str(canonical_order(Schedule::one_f_one_b, shape, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // M <= P-s-1: all forwards, then all backwards.
  const PipelineShape few{.stages = 4, .chunks = 1, .microbatches = 2};
  EXPECT_EQ(short_str(canonical_order(Schedule::one_f_one_b, few, 0)), "F0 F1 B0 B1");
  EXPECT_EQ(short_str(canonical_order(Schedule::one_f_one_b, few, 2)), "F0 F1 B0 B1");
  EXPECT_EQ(short_str(canonical_order(Schedule::one_f_one_b, few, 3)), "F0 B0 F1 B1");
  // P = 1 is Megatron's no-pipelining loop: forward and backward per microbatch.
  const PipelineShape one{.stages = 1, .chunks = 1, .microbatches = 3};
  EXPECT_EQ(short_str(canonical_order(Schedule::one_f_one_b, one, 0)), "F0 B0 F1 B1 F2 B2");
}

TEST(CanonicalOrder, Interleaved) {
  // P=2, V=2, M=4, G=2: table mb 0 1 0 1 2 3 2 3, chunk 0 0 1 1 0 0 1 1.
  const PipelineShape shape{.stages = 2, .chunks = 2, .microbatches = 4};
  // Stage 0: warmup 2*(2-0-1) + (2-1)*2 = 4.
  EXPECT_EQ(warmup_forwards(Schedule::interleaved_1f1b, shape, 0), 4);
  EXPECT_EQ(order_str(canonical_order(Schedule::interleaved_1f1b, shape, 0)),
            "F0.c0 F1.c0 F0.c1 F1.c1 F2.c0 B0.c1 F3.c0 B1.c1 F2.c1 B0.c0 F3.c1 B1.c0 B2.c1 B3.c1 B2.c0 B3.c0");
  // Stage 1: warmup 2.
  EXPECT_EQ(warmup_forwards(Schedule::interleaved_1f1b, shape, 1), 2);
  EXPECT_EQ(order_str(canonical_order(Schedule::interleaved_1f1b, shape, 1)),
            "F0.c0 F1.c0 F0.c1 B0.c1 F1.c1 B1.c1 F2.c0 B0.c0 F3.c0 B1.c0 F2.c1 B2.c1 F3.c1 B3.c1 B2.c0 B3.c0");
  // Warmup is capped at M*V: everything forward first.
  const PipelineShape short_run{.stages = 4, .chunks = 2, .microbatches = 4};
  EXPECT_EQ(warmup_forwards(Schedule::interleaved_1f1b, short_run, 0), 8);
}

TEST(CanonicalOrder, EveryOpOnce) {
  for (int P : {1, 2, 3, 4, 8})
    for (int M = 1; M <= 16; ++M)
      for (Schedule sch : {Schedule::gpipe, Schedule::one_f_one_b})
        for (int s = 0; s < P; ++s) {
          const auto order = canonical_order(sch, {.stages = P, .chunks = 1, .microbatches = M}, s);
          ASSERT_EQ(order.size(), size_t(2 * M));
          std::vector<int> f(static_cast<size_t>(M)), b(static_cast<size_t>(M));
          for (const Op& op : order) (op.kind == OpKind::forward ? f : b)[size_t(op.microbatch)]++;
          for (int m = 0; m < M; ++m) EXPECT_TRUE(f[size_t(m)] == 1 && b[size_t(m)] == 1);
        }
}

std::string validate_error(Schedule sch, const PipelineShape& shape) {
  try {
    validate(sch, shape);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Validate, ConstraintsNameTheFlags) {
  EXPECT_EQ(validate_error(Schedule::one_f_one_b, {.stages = 4, .chunks = 1, .microbatches = 3}), "");
  EXPECT_NE(validate_error(Schedule::one_f_one_b, {.stages = 4, .chunks = 2, .microbatches = 8})
                .find("--num-layers-per-virtual-pipeline-stage"),
            std::string::npos);
  EXPECT_NE(validate_error(Schedule::interleaved_1f1b, {.stages = 1, .chunks = 2, .microbatches = 8})
                .find("--pipeline-model-parallel-size"),
            std::string::npos);
  // Default G = P: M must be a multiple of P.
  EXPECT_EQ(validate_error(Schedule::interleaved_1f1b, {.stages = 4, .chunks = 2, .microbatches = 8}), "");
  EXPECT_NE(validate_error(Schedule::interleaved_1f1b, {.stages = 4, .chunks = 2, .microbatches = 6})
                .find("multiple of --pipeline-model-parallel-size"),
            std::string::npos);
  EXPECT_NE(validate_error(Schedule::interleaved_1f1b, {.stages = 4, .chunks = 2, .microbatches = 3})
                .find("--global-batch-size"),
            std::string::npos);
  // Explicit G: P <= G <= M, and M mod G is 0 or >= P.
  EXPECT_EQ(validate_error(Schedule::interleaved_1f1b, {.stages = 2, .chunks = 2, .microbatches = 5, .group_size = 3}),
            "");
  EXPECT_NE(validate_error(Schedule::interleaved_1f1b, {.stages = 4, .chunks = 2, .microbatches = 8, .group_size = 2})
                .find("--microbatch-group-size-per-vp-stage"),
            std::string::npos);
  EXPECT_NE(validate_error(Schedule::interleaved_1f1b, {.stages = 2, .chunks = 2, .microbatches = 7, .group_size = 3})
                .find("M mod G"),
            std::string::npos);
  EXPECT_NE(validate_error(Schedule::gpipe, {.stages = 2, .chunks = 1, .microbatches = 0}).find("--global-batch-size"),
            std::string::npos);
  EXPECT_THROW(schedule_from_name("zigzag"), Error);
  EXPECT_THROW(canonical_order(Schedule::gpipe, {.stages = 2, .chunks = 1, .microbatches = 2}, 2), Error);
}

// All (schedule, shape) combinations the emergence test covers.
std::vector<std::pair<Schedule, PipelineShape>> shapes_under_test() {
  std::vector<std::pair<Schedule, PipelineShape>> out;
  for (int P : {1, 2, 3, 4, 8})
    for (int M = 1; M <= 16; ++M) {
      out.push_back({Schedule::gpipe, {.stages = P, .chunks = 1, .microbatches = M}});
      out.push_back({Schedule::one_f_one_b, {.stages = P, .chunks = 1, .microbatches = M}});
      for (int V : {1, 2, 3})
        for (int G : {0, P, P + 1, 2 * P}) {
          const PipelineShape shape{.stages = P, .chunks = V, .microbatches = M, .group_size = G};
          if (G == P && G != 0) continue;  // same as the default
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

TEST(StagePolicy, EqualDurationsReproduceCanonicalOrder) {
  int interleaved = 0;
  for (const auto& [sch, shape] : shapes_under_test()) {
    interleaved += sch == Schedule::interleaved_1f1b;
    const Simulation sim = simulate(sch, shape, OpDurations::uniform(shape, 100, 100));
    for (int s = 0; s < shape.stages; ++s)
      ASSERT_EQ(order_str(sim.order[size_t(s)]), order_str(canonical_order(sch, shape, s)))
          << shape_str(sch, shape) << " stage " << s;
  }
  EXPECT_GT(interleaved, 100);
}

TEST(StagePolicy, OneFOneBRespectsInFlightLimitAndPrefersBackward) {
  const PipelineShape shape{.stages = 4, .chunks = 1, .microbatches = 8};
  StagePolicy policy(Schedule::one_f_one_b, shape, 1);  // at most P - s = 3 in flight
  EXPECT_EQ(policy.max_in_flight(), 3);
  auto all = [](const Op&) { return true; };
  auto forwards_only = [](const Op& op) { return op.kind == OpKind::forward; };
  EXPECT_EQ(op_str(*policy.next(forwards_only)), "F0.c0");
  EXPECT_EQ(op_str(*policy.next(forwards_only)), "F1.c0");
  EXPECT_EQ(op_str(*policy.next(forwards_only)), "F2.c0");
  EXPECT_FALSE(policy.next(forwards_only));  // three in flight: wait for a gradient
  EXPECT_EQ(op_str(*policy.next(all)), "B0.c0");
  EXPECT_EQ(op_str(*policy.next(all)), "B1.c0");  // a ready backward goes first
  EXPECT_EQ(op_str(*policy.next(all)), "B2.c0");
  // Never ahead of the head of a queue: F3 is not ready, so F4 is not considered.
  EXPECT_FALSE(policy.next([](const Op& op) { return op.microbatch == 4; }));
  EXPECT_FALSE(policy.done());
  while (policy.next(all)) {}
  EXPECT_TRUE(policy.done());
  policy.reset();
  EXPECT_FALSE(policy.done());
  EXPECT_EQ(op_str(*policy.next(all)), "F0.c0");
}

TEST(StagePolicy, BackwardNeverBeforeItsForward) {
  StagePolicy policy(Schedule::one_f_one_b, {.stages = 2, .chunks = 1, .microbatches = 2}, 0);
  // Even if the caller claims B0 is ready, F0 has not run yet.
  EXPECT_EQ(op_str(*policy.next([](const Op&) { return true; })), "F0.c0");
}

TEST(StagePolicy, GPipeRunsEveryForwardFirst) {
  StagePolicy policy(Schedule::gpipe, {.stages = 2, .chunks = 1, .microbatches = 3}, 1);
  std::vector<Op> ops;
  while (auto op = policy.next([](const Op&) { return true; })) ops.push_back(*op);
  EXPECT_EQ(short_str(ops), "F0 F1 F2 B0 B1 B2");
}

TEST(StagePolicy, InterleavedPairsEachBackwardWithAForward) {
  // P=2, V=2, M=4, stage 0: warmup 4, so at most 5 in flight, and backward k waits for
  // forward 4 + k even when its gradient is already there.
  const PipelineShape shape{.stages = 2, .chunks = 2, .microbatches = 4};
  StagePolicy policy(Schedule::interleaved_1f1b, shape, 0);
  EXPECT_EQ(policy.max_in_flight(), 5);
  std::vector<Op> ops;
  while (auto op = policy.next([](const Op&) { return true; })) ops.push_back(*op);
  EXPECT_EQ(order_str(ops), order_str(canonical_order(Schedule::interleaved_1f1b, shape, 0)));
}

}  // namespace
}  // namespace troupe::schedules
