// layer_time: the layer spans a traced run marks inside an op, told apart from the op's other time.
#include <gtest/gtest.h>

#include "schedules/layer_time.hpp"

namespace troupe::schedules {
namespace {

TraceEvent event(EventKind kind, int stage, int chunk, int microbatch, int64_t iteration, int64_t start, int64_t end) {
  TraceEvent e;
  e.actor = "stage" + std::to_string(stage);
  e.stage = stage;
  e.kind = kind;
  e.chunk = chunk;
  e.microbatch = microbatch;
  e.iteration = iteration;
  e.start_ns = start;
  e.end_ns = end;
  return e;
}

TEST(LayerTime, LayersInsideTheirOpAndTheRestAroundThem) {
  const std::vector<TraceEvent> events = {
      // Stage 0 chunk 0, microbatch 0: a forward of two 300 ns layers in 1000 ns (400 around them).
      event(EventKind::forward, 0, 0, 0, 2, 0, 1000),
      event(EventKind::layer, 0, 0, 0, 2, 100, 400),
      event(EventKind::layer, 0, 0, 0, 2, 400, 700),
      // Its backward, later: two 600 ns layers in 1500 ns.
      event(EventKind::backward, 0, 0, 0, 2, 2000, 3500),
      event(EventKind::layer, 0, 0, 0, 2, 2100, 2700),
      event(EventKind::layer, 0, 0, 0, 2, 2700, 3300),
      // Stage 1: a forward of two 200 ns layers in 600 ns.
      event(EventKind::forward, 1, 0, 0, 2, 1000, 1600),
      event(EventKind::layer, 1, 0, 0, 2, 1100, 1300),
      event(EventKind::layer, 1, 0, 0, 2, 1300, 1500),
      // Microbatch 1 marked nothing: not counted.
      event(EventKind::forward, 0, 0, 1, 2, 4000, 5000),
      // Another iteration, left out by the filter.
      event(EventKind::forward, 0, 0, 0, 3, 9000, 9900),
      event(EventKind::layer, 0, 0, 0, 3, 9100, 9800),
  };
  const LayerTime t = layer_time(events, {2});
  ASSERT_EQ(t.kinds.size(), 2u);
  const LayerTimeOfKind& f = t.kinds[0];
  EXPECT_EQ(f.kind, EventKind::forward);
  EXPECT_EQ(f.ops, 2);
  EXPECT_EQ(f.layers, 4);
  EXPECT_EQ(f.layer_ns, 600 + 400);
  EXPECT_EQ(f.around.at({0, 0}), std::make_pair(int64_t(1), int64_t(400)));
  EXPECT_EQ(f.around.at({1, 0}), std::make_pair(int64_t(1), int64_t(200)));
  const LayerTimeOfKind& b = t.kinds[1];
  EXPECT_EQ(b.kind, EventKind::backward);
  EXPECT_EQ(b.layers, 2);
  EXPECT_EQ(b.layer_ns, 1200);
  EXPECT_EQ(b.around.at({0, 0}), std::make_pair(int64_t(1), int64_t(300)));

  // All iterations: iteration 3's forward counts too.
  EXPECT_EQ(layer_time(events, {}).kinds[0].ops, 3);
}

}  // namespace
}  // namespace troupe::schedules
