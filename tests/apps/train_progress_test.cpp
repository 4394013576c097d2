// The elapsed time and ETA at the end of `troupe train`'s log line (apps/train/train_progress.hpp):
// the ETA is the mean time of the iterations so far but the first times the iterations left,
// unknown until two have run; both print as `troupe monitor` shows durations, after Megatron's
// fields.
#include <gtest/gtest.h>

#include <cmath>

#include "apps/common/duration_format.hpp"
#include "apps/train/train_progress.hpp"

namespace troupe::test {
namespace {

using apps::LogWindow;
using apps::TrainProgress;

TEST(TrainProgress, EtaIsTheMeanIterationTimeButTheFirstTimesTheIterationsLeft) {
  const auto start = std::chrono::steady_clock::now();
  TrainProgress progress(100, start);
  progress.add(30.0);  // the first: warm-up, left out
  EXPECT_TRUE(std::isnan(progress.eta_seconds(1)));
  progress.add(2.0);
  progress.add(4.0);
  EXPECT_DOUBLE_EQ(progress.eta_seconds(3), 3.0 * 97);
  EXPECT_DOUBLE_EQ(progress.eta_seconds(100), 0.0);
  LogWindow w;
  w.iteration = 3;
  progress.stamp(w, start + std::chrono::seconds(83));
  EXPECT_DOUBLE_EQ(w.elapsed_seconds, 83.0);
  EXPECT_DOUBLE_EQ(w.eta_seconds, 291.0);
}

TEST(TrainProgress, TheLogLineEndsWithElapsedAndEta) {
  LogWindow w{.iteration = 3, .train_iters = 100, .consumed_samples = 12, .global_batch_size = 4};
  w.elapsed_seconds = 83, w.eta_seconds = 605;
  const std::string line = apps::iteration_line(w);
  const std::string tail = "number of nan iterations:   0 | elapsed: 1m23s | ETA: 10m05s |";
  ASSERT_GE(line.size(), tail.size());
  EXPECT_EQ(line.substr(line.size() - tail.size()), tail) << line;
  w.eta_seconds = NAN;  // unknown after the first iteration
  EXPECT_NE(apps::iteration_line(w).find("| ETA: ? |"), std::string::npos);
}

TEST(DurationFormat, AsTheMonitorShowsIt) {
  EXPECT_EQ(apps::format_duration(83), "1m23s");
  EXPECT_EQ(apps::format_duration(3 * 3600 + 125), "3h02m");
  EXPECT_EQ(apps::format_duration(-1), "?");
}

}  // namespace
}  // namespace troupe::test
