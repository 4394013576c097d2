// A failed run whose shutdown cannot finish (a stage wedged for good: a device call or a
// collective no abort reaches) ends the process with the failure's message and exit status 1
// within TrainingConfig::failed_shutdown_limit, instead of hanging (as `troupe train` once did
// after a device deadlock on two GPUs).
#include <chrono>
#include <thread>

#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using schedules::Op;
using schedules::OpKind;

void train_with_a_wedged_stage(std::chrono::milliseconds limit) {
  actors::TrainingConfig config = tiny_config(false, 2, 1);
  config.op_timeout = std::chrono::milliseconds(300);
  config.failed_shutdown_limit = limit;
  config.before_op = [](int stage, const Op& op) {
    if (stage == 1 && op == Op{OpKind::forward, 2, 0})
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // never returns
  };
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  for (int i = 0; i < 3; ++i) run.train_iteration();  // throws: the watchdog names stage 1
}

TEST(StuckShutdown, EndsTheProcessWithTheFailure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(train_with_a_wedged_stage(std::chrono::seconds(2)), testing::ExitedWithCode(1),
              "stage 1 failed in forward of microbatch 2.*shutdown after it did not finish within 2 s");
  // op timeout (0.3 s) + the limit (2 s) + starting the child; without the limit: forever.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15.0);
}

// The limit only acts on a shutdown that is stuck: a failed run that shuts down in time
// leaves the process running.
TEST(StuckShutdown, AShutdownInTimeLeavesTheProcessAlone) {
  actors::TrainingConfig config = tiny_config(false, 2, 1);
  config.failed_shutdown_limit = std::chrono::seconds(5);
  config.before_op = [](int stage, const Op& op) {
    if (stage == 1 && op == Op{OpKind::backward, 1, 0}) throw Error("injected fault");
  };
  {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    EXPECT_THROW(run.train_iteration(), Error);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5500));  // past the limit: still here
  SUCCEED();
}

}  // namespace
}  // namespace troupe::test
