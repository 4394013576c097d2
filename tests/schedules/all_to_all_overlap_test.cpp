// The trace's expert all-to-all report (schedules/all_to_all_overlap.hpp): hidden time is the
// part of each dispatch or combine that overlapped compute of the same op covers, and a span is
// matched to the forward or backward op that contains it.
#include "schedules/all_to_all_overlap.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace troupe::schedules {
namespace {

TraceEvent span(EventKind kind, int microbatch, int64_t iteration, int64_t start, int64_t end) {
  return {.actor = "stage0",
          .device = 0,
          .stage = 0,
          .kind = kind,
          .microbatch = microbatch,
          .chunk = 0,
          .iteration = iteration,
          .start_ns = start,
          .end_ns = end};
}

TEST(AllToAllOverlap, CountsTheCoveredPartOfEachExchangeWithinItsOwnOp) {
  std::vector<TraceEvent> events = {
      // Iteration 1, microbatch 0: forward [0, 100], backward [200, 300].
      span(EventKind::forward, 0, 1, 0, 100),
      span(EventKind::moe_overlap, 0, 1, 5, 25),  // covers 15 of the dispatch
      span(EventKind::moe_dispatch, 0, 1, 10, 30),
      span(EventKind::moe_overlap, 0, 1, 60, 80),  // covers 10 of the combine
      span(EventKind::moe_combine, 0, 1, 50, 70),
      span(EventKind::backward, 0, 1, 200, 300),
      span(EventKind::moe_dispatch, 0, 1, 210, 230),
      span(EventKind::moe_overlap, 0, 1, 220, 225),  // 5 of the backward's dispatch
      span(EventKind::moe_combine, 0, 1, 240, 260),  // nothing beside it
      // Microbatch 1's overlapped compute does not hide microbatch 0's exchanges.
      span(EventKind::forward, 1, 1, 100, 200),
      span(EventKind::moe_overlap, 1, 1, 100, 200),
      // Iteration 2 is not asked for.
      span(EventKind::forward, 0, 2, 1000, 1100),
      span(EventKind::moe_dispatch, 0, 2, 1010, 1090),
  };
  const AllToAllOverlap o = all_to_all_overlap(events, {1});
  EXPECT_EQ(o.spans, 4);
  EXPECT_EQ(o.dispatch_ns, 20 + 20);
  EXPECT_EQ(o.combine_ns, 20 + 20);
  EXPECT_EQ(o.hidden_ns, 15 + 10 + 5);
  EXPECT_EQ(o.overlap_ns, 20 + 20 + 5 + 100);
  EXPECT_DOUBLE_EQ(o.hidden_fraction(), 30.0 / 80.0);
  EXPECT_EQ(o.beside_ns, 0);  // no two ops of the stage overlap here
  EXPECT_EQ(o.covered_ns, o.hidden_ns);
  EXPECT_EQ(o.iterations, 1);
  EXPECT_EQ(o.stages, 1);

  const AllToAllOverlap all = all_to_all_overlap(events, {});
  EXPECT_EQ(all.spans, 5);
  EXPECT_EQ(all.iterations, 2);
  EXPECT_EQ(all_to_all_overlap({span(EventKind::forward, 0, 1, 0, 10)}, {}).spans, 0);
}

// --overlap-moe-expert-parallel-comm: a forward runs beside the backward of another microbatch.
// The part of its exchanges while that backward was in flight counts as beside another op; the
// shared expert's cover and the other op's are counted once where they meet.
TEST(AllToAllOverlap, CountsTheTimeAnotherOpOfTheStageWasInFlight) {
  std::vector<TraceEvent> events = {
      span(EventKind::backward, 0, 1, 0, 100),
      span(EventKind::forward, 1, 1, 50, 200),
      span(EventKind::moe_dispatch, 1, 1, 60, 120),  // 40 beside the backward
      span(EventKind::moe_overlap, 1, 1, 90, 110),   // 20 hidden, 10 of it also beside the backward
      span(EventKind::moe_combine, 1, 1, 150, 170),  // alone
      span(EventKind::moe_dispatch, 0, 1, 10, 20),   // the backward's: beside nothing (mb 1 starts at 50)
      // Another stage's op covers nothing here.
      TraceEvent{.actor = "stage1",
                 .stage = 1,
                 .kind = EventKind::forward,
                 .microbatch = 0,
                 .iteration = 1,
                 .start_ns = 0,
                 .end_ns = 1000},
  };
  const AllToAllOverlap o = all_to_all_overlap(events, {});
  EXPECT_EQ(o.spans, 3);
  EXPECT_EQ(o.total_ns(), 60 + 20 + 10);
  EXPECT_EQ(o.hidden_ns, 20);
  EXPECT_EQ(o.beside_ns, 40);
  EXPECT_EQ(o.covered_ns, 50);
  EXPECT_DOUBLE_EQ(o.beside_fraction(), 40.0 / 90.0);
  EXPECT_DOUBLE_EQ(o.covered_fraction(), 50.0 / 90.0);
}

}  // namespace
}  // namespace troupe::schedules
