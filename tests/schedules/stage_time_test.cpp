// Where each stage's time went (schedules/stage_time.hpp): every instant of the window counts
// once, in the first category covering it; host events count on every stage; data-loader time
// counts only before the iteration's first forward; events are clipped to the window.
#include "schedules/stage_time.hpp"

#include <gtest/gtest.h>

namespace troupe::schedules {
namespace {

TraceEvent ev(int stage, EventKind kind, int64_t start, int64_t end) {
  TraceEvent e;
  e.actor = stage >= 0 ? "stage" + std::to_string(stage) : "host";
  e.stage = stage;
  e.kind = kind;
  e.start_ns = start;
  e.end_ns = end;
  return e;
}

int64_t sum(const StageTime& t) {
  return t.busy_ns + t.communication_ns + t.data_ns + t.checkpoint_ns + t.optimizer_ns + t.idle_ns;
}

TEST(StageTime, TwoStagesWithEveryCategory) {
  // Window [0, 100). Stage 0: data 0-10 (host), forward 10-30, backward 60-80; stage 1: recv
  // 25-35 overlapping nothing of its own but a forward 35-55, backward 55-65; a checkpoint
  // 0-5 (host, before the data ends: checkpoint loses to data where both cover), the
  // optimizer 85-95 (host).
  const std::vector<TraceEvent> events = {
      ev(-1, EventKind::data, 0, 10),      ev(0, EventKind::forward, 10, 30),    ev(0, EventKind::backward, 60, 80),
      ev(1, EventKind::recv, 25, 35),      ev(1, EventKind::forward, 35, 55),    ev(1, EventKind::backward, 55, 65),
      ev(-1, EventKind::checkpoint, 0, 5), ev(-1, EventKind::optimizer, 85, 95),
  };
  const StageTimes t = stage_times(events, 2, 0, 100);
  ASSERT_EQ(t.stages.size(), 2u);
  EXPECT_EQ(t.window_ns(), 100);
  const StageTime s0{
      .busy_ns = 40, .communication_ns = 0, .data_ns = 10, .checkpoint_ns = 0, .optimizer_ns = 10, .idle_ns = 40};
  const StageTime s1{
      .busy_ns = 30, .communication_ns = 10, .data_ns = 10, .checkpoint_ns = 0, .optimizer_ns = 10, .idle_ns = 40};
  EXPECT_EQ(t.stages[0], s0);
  EXPECT_EQ(t.stages[1], s1);
  for (const StageTime& s : t.stages) EXPECT_EQ(sum(s), 100);
}

TEST(StageTime, BusyWinsOverlapsAndEventsAreClippedToTheWindow) {
  // A forward straddling the window start, a recv under a backward (busy wins), a checkpoint
  // after the window (left out), a stage outside [0, P) (ignored).
  const std::vector<TraceEvent> events = {
      ev(0, EventKind::forward, -50, 20),      ev(0, EventKind::backward, 30, 60), ev(0, EventKind::recv, 40, 70),
      ev(-1, EventKind::checkpoint, 100, 200), ev(3, EventKind::forward, 0, 100),
  };
  const StageTimes t = stage_times(events, 1, 0, 100);
  ASSERT_EQ(t.stages.size(), 1u);
  EXPECT_EQ(t.stages[0].busy_ns, 50);
  EXPECT_EQ(t.stages[0].communication_ns, 10);
  EXPECT_EQ(t.stages[0].checkpoint_ns, 0);
  EXPECT_EQ(t.stages[0].idle_ns, 40);
  EXPECT_EQ(sum(t.stages[0]), 100);
}

TEST(StageTime, PrefetchOverlappingThePreviousIterationIsNotWaiting) {
  // The loader worked from -80 to 15 (prefetching during the previous iteration); the window
  // starts at 0 and the first forward at 15: only 0-15 is waiting on data. A data event after
  // the first forward (an evaluation's batches) is not waiting either.
  const std::vector<TraceEvent> events = {ev(-1, EventKind::data, -80, 15), ev(0, EventKind::forward, 15, 90),
                                          ev(-1, EventKind::data, 90, 95)};
  const StageTimes t = stage_times(events, 1, 0, 100);
  EXPECT_EQ(t.stages[0].data_ns, 15);
  EXPECT_EQ(t.stages[0].busy_ns, 75);
  EXPECT_EQ(t.stages[0].idle_ns, 10);
}

TEST(StageTime, EmptyWindowAndNoEvents) {
  const StageTimes t = stage_times({}, 3, 500, 400);  // an end before the start: an empty window
  ASSERT_EQ(t.stages.size(), 3u);
  EXPECT_EQ(t.window_ns(), 0);
  for (const StageTime& s : t.stages) EXPECT_EQ(sum(s), 0);
  const StageTimes idle = stage_times({}, 1, 0, 10);
  EXPECT_EQ(idle.stages[0].idle_ns, 10);
}

}  // namespace
}  // namespace troupe::schedules
