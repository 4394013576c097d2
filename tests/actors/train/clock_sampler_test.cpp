// ClockSampler: each device's clock read on its thread, handed out as trace events of the
// iteration that drains them; a device that cannot be read gives none.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "actors/train/clock_sampler.hpp"

namespace troupe::actors {
namespace {

TEST(ClockSampler, SamplesEveryDeviceAsClockEventsOfTheDrainingIteration) {
  std::atomic<int> reads{0};
  const auto epoch = std::chrono::steady_clock::now();
  ClockSampler s(
      {{.stage = 0, .device = 3}, {.stage = 1, .device = 5}, {.stage = 2, .device = 7}}, epoch,
      [&](int device) {
        ++reads;
        return device == 7 ? 0 : 1000 + device;  // device 7 cannot be read
      },
      std::chrono::milliseconds(1));
  while (reads.load() < 30) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::vector<schedules::TraceEvent> got = s.drain(42);
  ASSERT_GE(got.size(), 10u);
  int64_t last = -1;
  for (const schedules::TraceEvent& e : got) {
    EXPECT_EQ(e.kind, schedules::EventKind::clock);
    EXPECT_EQ(e.iteration, 42);
    EXPECT_NE(e.device, 7);
    EXPECT_EQ(e.stage, e.device == 3 ? 0 : 1);
    EXPECT_EQ(e.sm_clock_mhz, 1000 + e.device);
    EXPECT_EQ(e.start_ns, e.end_ns);
    EXPECT_GE(e.start_ns, last);  // in time order
    last = e.start_ns;
  }
  // Drained: the next call starts after them.
  const std::vector<schedules::TraceEvent> next = s.drain(43);
  for (const schedules::TraceEvent& e : next) EXPECT_GE(e.start_ns, last);
}

}  // namespace
}  // namespace troupe::actors
