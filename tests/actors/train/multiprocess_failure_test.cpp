// A failure in one process ends the run in every process, with an error, within the op
// timeout (run under `mpirun -np 2`: multiprocess_failure_test_np2, and as two processes linked
// over TCP: multiprocess_failure_test_tcp_np2; one process: skipped).
// Process 1's last pipeline stage throws in a backward; process 0 learns it from the down
// message of that (remote) stage actor, or at the latest from its watchdog, and both
// processes' train_iteration throw instead of hanging.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "actors/fabric/fabric.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

TEST(MultiprocessFailure, AFailingStageEndsTheRunInEveryProcess) {
  if (test_fabric()->processes() != 2) GTEST_SKIP() << "runs as two processes";
  actors::TrainingConfig config = tiny_config(false, 2, 1);  // stage 0 in process 0, stage 1 in process 1
  config.op_timeout = std::chrono::seconds(20);
  const int process = test_fabric()->process();
  config.before_op = [process](int stage, const schedules::Op& op) {
    if (process == 1 && stage == 1 && op.kind == schedules::OpKind::backward && op.microbatch == 2)
      throw Error("injected fault");
  };
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run.train_iteration();
    ADD_FAILURE() << "process " << process << ": no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    std::printf("process %d: %s\n", process, what.c_str());
    if (process == 1)
      EXPECT_NE(what.find("injected fault"), std::string::npos) << what;
    else  // the other process names the stage that went away
      EXPECT_NE(what.find("stage 1"), std::string::npos) << what;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 20.0) << "process " << process << " took " << seconds << " s to fail";
  std::printf("process %d failed after %.2f s\n", process, seconds);
}

// Tensor parallelism across the processes: process 0's rank waits inside a collective for
// process 1's, which has failed; the abort must reach it long before the op timeout.
TEST(MultiprocessFailure, AFailingTensorRankEndsTheRunInEveryProcess) {
  if (test_fabric()->processes() != 2) GTEST_SKIP() << "runs as two processes";
  actors::TrainingConfig config = tiny_config(false, 1, 1);
  config.parallel.tensor_size = 2;  // tensor rank r in process r
  config.op_timeout = std::chrono::seconds(60);
  const int process = test_fabric()->process();
  config.before_op = [process](int, const schedules::Op& op) {
    if (process == 1 && op.kind == schedules::OpKind::forward && op.microbatch == 1) throw Error("injected fault");
  };
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run.train_iteration();
    ADD_FAILURE() << "process " << process << ": no error";
  } catch (const Error& e) {
    std::printf("process %d: %s\n", process, e.what());
    if (process == 1) {
      EXPECT_NE(std::string(e.what()).find("injected fault"), std::string::npos) << e.what();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 10.0) << "process " << process << " took " << seconds << " s to fail";
  std::printf("process %d failed after %.2f s\n", process, seconds);
}

// A process that stops (SIGSTOP) keeps its connections open: no down message comes. The other
// process notices from the heartbeats it no longer gets, long before the op timeout, and ends
// the run; then it wakes the stopped one (SIGCONT), whose run ends with an error too.
TEST(MultiprocessFailure, AStoppedProcessEndsTheRunAtTheHeartbeatTimeout) {
  if (test_fabric()->processes() != 2) GTEST_SKIP() << "runs as two processes";
  actors::TrainingConfig config = tiny_config(false, 2, 1);  // stage 0 in process 0, stage 1 in process 1
  config.op_timeout = std::chrono::seconds(120);
  config.heartbeat_timeout = std::chrono::seconds(3);
  const int process = test_fabric()->process();
  const std::vector<std::string> pids = test_fabric()->all_gather(std::to_string(getpid()));
  config.before_op = [process](int stage, const schedules::Op& op) {
    if (process == 1 && stage == 1 && op.kind == schedules::OpKind::backward && op.microbatch == 2) raise(SIGSTOP);
  };
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    run.train_iteration();
  } catch (const Error& e) {
    what = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("process %d after %.2f s: %s\n", process, seconds, what.c_str());
  if (process == 0) {
    kill(pid_t(std::stoi(pids[1])), SIGCONT);
    EXPECT_NE(what.find("process 1 has not been heard from"), std::string::npos) << what;
    EXPECT_LT(seconds, 10.0) << "the stopped process was noticed only after " << seconds << " s";
  } else {
    EXPECT_FALSE(what.empty()) << "process 1 trained on after process 0 ended the run";
  }
}

}  // namespace
}  // namespace troupe::test
