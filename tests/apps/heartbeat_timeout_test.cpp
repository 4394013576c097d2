// `troupe train --heartbeat-timeout S`: out-of-range values are refused naming the flag, and
// under mpirun the value reaches the run: a process stopped with SIGSTOP ends the run after S
// seconds (the error names the timeout), not after the default 20. The heartbeat mechanism
// itself is tested in tests/actors/train/multiprocess_failure_test.cpp.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HeartbeatTimeout, OutOfRangeValuesAreRefusedNamingTheFlag) {
  TempDir dir("heartbeat_flag");
  for (const std::string bad : {"0.5", "0", "-3", "nan", "inf", "ten"}) {
    Troupe t(tiny_train_args(1, {"--heartbeat-timeout", bad}), dir / "out.txt");
    EXPECT_EQ(t.wait(120s), std::optional<int>(2)) << bad << ": " << t.output();
    EXPECT_TRUE(contains(t.output(), "--heartbeat-timeout")) << bad << ": " << t.output();
  }
  Troupe ok(tiny_train_args(1, {"--heartbeat-timeout", "1.5"}), dir / "ok.txt");
  EXPECT_EQ(ok.wait(120s), std::optional<int>(0)) << ok.output();
}

// The child of `parent` that mpirun started as rank `rank`; -1 if none (yet).
pid_t mpi_rank_pid(pid_t parent, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    long ppid = 0;
    if (!(stat >> pid >> comm >> state >> ppid) || ppid != parent) continue;
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    for (std::string var; std::getline(environ, var, '\0');)
      if (var == "OMPI_COMM_WORLD_RANK=" + std::to_string(rank)) return pid_t(std::stol(name));
  }
  return -1;
}

TEST(HeartbeatTimeout, ReachesTheRunUnderMpirun) {
  const std::optional<std::vector<std::string>> mpirun = mpirun_launcher(2);
  if (!mpirun) GTEST_SKIP() << "no mpirun";
  TempDir dir("heartbeat_mpi");
  // Stage 0 in process 0, stage 1 in process 1; 32 microbatches an iteration, so that most of
  // the time an iteration's pipeline (which the heartbeats guard) is under way.
  std::vector<std::string> args = tiny_train_args(1000000, {"--pipeline-model-parallel-size", "2", "--devices", "1",
                                                            "--heartbeat-timeout", "2", "--op-timeout", "300"});
  *(std::find(args.begin(), args.end(), "--global-batch-size") + 1) = "32";
  *(std::find(args.begin(), args.end(), "--log-interval") + 1) = "10";
  Troupe t(*mpirun, args, dir / "out.txt");
  t.await_output("iteration       10/", 120s);
  const pid_t rank1 = mpi_rank_pid(t.pid(), 1);
  ASSERT_GT(rank1, 0) << "no rank 1 among mpirun's children";
  // Stopped for good, at whatever moment of the iteration (its pipeline, the sums between
  // processes, the optimizer step): process 0 must end the run with the heartbeat's error
  // within the timeout (2 s) plus the bounded shutdown after a failure (30 s), far below the
  // default timeout of 20 s plus --op-timeout 300 s.
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  const std::optional<int> code = t.wait(60s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  ::kill(rank1, SIGKILL);  // mpirun may be waiting for it
  std::printf("the run ended %.1f s after process 1 was stopped\n", took);
  const std::string log = t.output();
  const bool noticed = contains(log, "process 1 has not been heard from for ");
  ASSERT_TRUE(noticed) << log;
  EXPECT_TRUE(contains(log, "(heartbeat timeout 2000 ms)")) << log;
  ASSERT_TRUE(code.has_value()) << log;
  EXPECT_NE(*code, 0) << log;
  EXPECT_LT(took, 40.0) << log;
}

}  // namespace
}  // namespace troupe::test
