// The clock offset of each process to process 0 (Fabric::clock_offset, host_clock_offset): the
// estimate from the round of least round trip, and, under `mpirun -np 2` (clock_offset_test_np2)
// and over TCP (clock_offset_test_tcp_np2), the measured offset of clocks that are set apart on
// purpose. As one process it checks the estimator and that one process has offset 0.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "actors/fabric/fabric.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

TEST(ClockOffset, TheRoundOfLeastRoundTripDecides) {
  // Process 0's clock reads 1000 more than ours. Round 2 was delayed on the way out (its
  // estimate would be 40 off); round 1 is the fastest and exact: rtt 10, peer read at +5.
  const std::vector<actors::ClockSample> samples = {
      {.send_ns = 0, .peer_ns = 1'020, .recv_ns = 30},
      {.send_ns = 100, .peer_ns = 1'105, .recv_ns = 110},
      {.send_ns = 200, .peer_ns = 1'280, .recv_ns = 280},
  };
  const actors::ClockOffset o = actors::clock_offset_estimate(samples);
  EXPECT_EQ(o.offset_ns, 1'000);
  EXPECT_EQ(o.rtt_ns, 10);
  EXPECT_THROW(actors::clock_offset_estimate({}), Error);
}

TEST(ClockOffset, ClocksSetApartAreMeasuredApart) {
  actors::Fabric& f = *test_fabric();
  // Every process's clock: the machine's steady clock minus (process x 1.5 s), as if each had
  // started 1.5 s after the one before; process 0's clock minus process p's is then p x 1.5 s.
  const int64_t apart = 1'500'000'000;
  const int64_t shift = f.process() * apart;
  const auto now = [shift] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
               .count() -
           shift;
  };
  const actors::ClockOffset o = f.clock_offset(now, 16);
  // Twice in a row gives the same answer: the exchanges stay paired (every process takes part).
  const actors::ClockOffset again = f.clock_offset(now, 4);
  if (f.process() == 0) {
    EXPECT_EQ(o.offset_ns, 0);
    EXPECT_EQ(o.rtt_ns, 0);
    EXPECT_EQ(again.offset_ns, 0);
    return;
  }
  // One machine, one steady clock: right to within half the round trip (well under 5 ms here).
  EXPECT_GT(o.rtt_ns, 0);
  EXPECT_LT(o.rtt_ns, 10'000'000);
  EXPECT_NEAR(double(o.offset_ns), double(shift), double(o.rtt_ns) / 2 + 1e3) << "round trip " << o.rtt_ns << " ns";
  EXPECT_NEAR(double(again.offset_ns), double(shift), double(again.rtt_ns) / 2 + 1e3);
}

}  // namespace
}  // namespace troupe::test
