// The straggler report (apps/train/straggler_report.hpp): a device is named when its busy time
// per iteration is over the factor times the median of the other devices of its pipeline stage,
// and only then; stages are not compared with each other; the window averages its iterations.
#include <gtest/gtest.h>

#include "apps/train/straggler_report.hpp"

namespace troupe::test {
namespace {

using apps::find_stragglers;
using apps::Straggler;
using apps::straggler_text;
using apps::StragglerWindow;

TEST(StragglerReport, NamesTheDeviceFarAboveItsStagePeers) {
  const RankLayout layout{.data = 4, .pipeline = 2};  // stage 0: ranks 0-3, stage 1: ranks 4-7
  // Stage 1 is slower as a whole (it holds the loss): no straggler. Rank 5 is 2.4x its peers.
  const std::vector<double> busy = {10, 10.5, 9.5, 10, 20, 48, 19, 21};
  const std::vector<Straggler> found = find_stragglers(busy, layout, 1.5);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 5);
  EXPECT_EQ(found[0].peers, 3);
  EXPECT_DOUBLE_EQ(found[0].peer_median_ms, 20);
  EXPECT_DOUBLE_EQ(found[0].ratio(), 2.4);
  EXPECT_EQ(straggler_text(found[0], layout),
            "straggler: device 5 (stage 1, data rank 1) 2.4x the median busy time of its 3 peers (48.0 ms vs 20.0 ms "
            "per iteration)");
}

TEST(StragglerReport, AnEvenRunHasNone) {
  const RankLayout layout{.tensor = 2, .data = 2};
  EXPECT_TRUE(find_stragglers({10, 11, 12, 13}, layout, 1.5).empty());
  EXPECT_TRUE(find_stragglers({10, 14, 10, 10}, layout, 1.5).empty());  // 1.4x: under the factor
  const std::vector<Straggler> found = find_stragglers({10, 16, 10, 10}, layout, 1.5);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(straggler_text(found[0], layout).rfind("straggler: device 1 (stage 0, tensor rank 1, data rank 0) 1.6x", 0),
            0u)
      << straggler_text(found[0], layout);
}

TEST(StragglerReport, TwoReplicasCompareWithEachOther) {
  const RankLayout layout{.data = 2};
  const std::vector<Straggler> found = find_stragglers({30, 10}, layout, 1.5);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 0);
  EXPECT_EQ(found[0].peers, 1);
  EXPECT_NE(straggler_text(found[0], layout).find("its 1 peer ("), std::string::npos);
}

TEST(StragglerReport, NothingToCompareOrTurnedOff) {
  EXPECT_TRUE(find_stragglers({10, 50}, RankLayout{.pipeline = 2}, 1.5).empty());  // one device per stage
  EXPECT_TRUE(find_stragglers({30, 10}, RankLayout{.data = 2}, 0).empty());        // --straggler-factor 0
  // Microseconds of jitter on tiny ops: over the factor, under kMinExcessMs.
  EXPECT_TRUE(find_stragglers({0.3, 0.1}, RankLayout{.data = 2}, 1.5).empty());
}

TEST(StragglerReport, TheWindowAveragesItsIterations) {
  StragglerWindow window(RankLayout{.data = 2}, 1.5);
  IterationStats s;
  s.busy_ms = {10, 10};
  window.add(s);
  s.busy_ms = {10, 40};  // one slow iteration: 25 vs 10 on average
  window.add(s);
  apps::LogWindow line;
  window.stamp(line);
  ASSERT_EQ(line.straggler_devices, std::vector<int64_t>{1});
  ASSERT_EQ(line.stragglers.size(), 1u);
  EXPECT_NE(line.stragglers[0].find("2.5x"), std::string::npos) << line.stragglers[0];
  s.busy_ms = {10, 10};  // a fresh window
  window.add(s);
  window.stamp(line);
  EXPECT_TRUE(line.stragglers.empty());
  EXPECT_TRUE(line.straggler_devices.empty());
}

}  // namespace
}  // namespace troupe::test
