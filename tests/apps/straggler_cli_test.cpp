// `troupe train`'s straggler report and progress fields, as a separate process on CPU devices:
// - a device slowed down by the test hook TROUPE_SLOW_DEVICE (each of its ops sleeps) is named in
//   the log, with its stage and data rank, in a data-parallel run of 4 devices;
// - an even run names no straggler, and --straggler-factor 0 turns the report off;
// - the iteration line ends with the elapsed time and the ETA after Megatron's fields.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

// A GPT of 0.9M parameters on random tokens, one microbatch per device and iteration over 4
// CPU devices (data-parallel), a log line every 4 iterations.
std::vector<std::string> args(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",
                                "--mock-data",
                                "--model",
                                "gpt2-tiny",
                                "--device",
                                "cpu",
                                "--devices",
                                "4",
                                "--vocab-size",
                                "512",
                                "--seq-length",
                                "32",
                                "--micro-batch-size",
                                "1",
                                "--global-batch-size",
                                "4",
                                "--train-iters",
                                "8",
                                "--log-interval",
                                "4",
                                "--eval-iters",
                                "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

struct TrainRun {
  std::optional<int> code;
  std::string output;
};

// `slow_device`: TROUPE_SLOW_DEVICE for the child ("" unset).
TrainRun train(const std::string& name, const std::string& slow_device, const std::vector<std::string>& extra = {}) {
  if (slow_device.empty())
    ::unsetenv("TROUPE_SLOW_DEVICE");
  else
    ::setenv("TROUPE_SLOW_DEVICE", slow_device.c_str(), 1);
  TempDir dir("straggler_" + name);
  Troupe t(args(extra), dir / "out.txt");
  TrainRun r;
  r.code = t.wait(180s);
  r.output = t.output();
  ::unsetenv("TROUPE_SLOW_DEVICE");
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(StragglerCli, ASlowedDeviceIsNamedInTheLog) {
  const TrainRun r = train("slow", "2:100");  // device 2 sleeps 100 ms in each forward and backward
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_TRUE(contains(r.output, "\n straggler: device 2 (stage 0, data rank 2) ")) << r.output;
  EXPECT_TRUE(contains(r.output, "x the median busy time of its 3 peers (")) << r.output;
  for (const char* other : {"straggler: device 0", "straggler: device 1", "straggler: device 3"})
    EXPECT_FALSE(contains(r.output, other)) << r.output;
}

TEST(StragglerCli, AnEvenRunNamesNone) {
  const TrainRun r = train("even", "");
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_FALSE(contains(r.output, "straggler:")) << r.output;
  // The log line: Megatron's fields, then the elapsed time and the ETA (known after 2 iterations).
  EXPECT_TRUE(contains(r.output, "number of nan iterations:   0 | elapsed: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "s | ETA: ")) << r.output;
  EXPECT_FALSE(contains(r.output, "ETA: ?")) << r.output;
}

TEST(StragglerCli, FactorZeroTurnsItOff) {
  const TrainRun r = train("off", "2:100", {"--straggler-factor", "0"});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_FALSE(contains(r.output, "straggler:")) << r.output;
}

TEST(StragglerCli, AMalformedHookIsAnErrorNamingIt) {
  const TrainRun r = train("malformed", "two:25");
  EXPECT_NE(r.code, std::optional<int>(0)) << r.output;
  EXPECT_TRUE(contains(r.output, "TROUPE_SLOW_DEVICE=two:25 is not RANK:MS")) << r.output;
}

}  // namespace
}  // namespace troupe::test
