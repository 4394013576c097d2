// `troupe train --auto-restart N` as a user runs it (apps/train/supervisor.hpp): a run that
// fails after a checkpoint (the TROUPE_FAULT_AT_ITERATION test hook) is restarted from it and ends
// bit for bit where an uninterrupted run ends; a training process killed with SIGKILL is
// restarted; SIGTERM to the supervisor stops the run (130) without a restart; out of restarts the
// failure's status comes back; --auto-restart without --save, and under mpirun, is refused.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>

#include <cstring>
#include <map>
#include <regex>

#include "storage/checkpoint_reader.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  std::optional<int> code;
  std::string output;
};

Outcome run_troupe(const std::vector<std::string>& args, const std::string& output) {
  Troupe t(args, output);
  Outcome o;
  o.code = t.wait(300s);
  o.output = t.output();
  return o;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The pid the supervisor printed for the training process of restart `restart`; -1 if none.
pid_t training_pid(const std::string& log, int restart) {
  const std::regex started(R"(training process (\d+) started \(restart )" + std::to_string(restart) + " of");
  std::smatch m;
  return std::regex_search(log, m, started) ? pid_t(std::stol(m[1].str())) : -1;
}

// Every tensor of iteration `iteration` in `a` and `b`, byte for byte.
void expect_same_checkpoint(const std::string& a, const std::string& b, int64_t iteration) {
  const CheckpointReader ra = CheckpointReader::open(a, iteration), rb = CheckpointReader::open(b, iteration);
  ASSERT_EQ(ra.names(), rb.names());
  ASSERT_FALSE(ra.names().empty());
  for (const std::string& name : ra.names()) {
    const Tensor ta = ra.read(name), tb = rb.read(name);
    ASSERT_EQ(ta.nbytes(), tb.nbytes()) << name;
    EXPECT_EQ(std::memcmp(ta.data(), tb.data(), ta.nbytes()), 0) << name << " differs after the restart";
  }
}

TEST(AutoRestart, FailedRunResumesFromItsCheckpointAndEndsAsAnUninterruptedRun) {
  TempDir dir("auto_restart");
  auto args = [&](const std::string& save, std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--save", save, "--save-interval", "2"});
    return tiny_train_args(8, extra);
  };
  const Outcome plain = run_troupe(args(dir / "plain", {}), dir / "plain.txt");
  ASSERT_EQ(plain.code, std::optional<int>(0)) << plain.output;
  Outcome restarted;
  {
    const ScopedEnv fault("TROUPE_FAULT_AT_ITERATION", "5");  // after the checkpoint of iteration 4
    restarted = run_troupe(args(dir / "restarted", {"--auto-restart", "2"}), dir / "restarted.txt");
  }
  const std::string& log = restarted.output;
  ASSERT_EQ(restarted.code, std::optional<int>(0)) << log;
  // The log names the restart, why (the status and the process's last error) and where it resumes.
  EXPECT_TRUE(contains(log, "restart 1 of 2: the training process ")) << log;
  EXPECT_TRUE(contains(log, "exited with status 1 after the error: troupe: error: TROUPE_FAULT_AT_ITERATION=5")) << log;
  EXPECT_TRUE(contains(log, "resuming from iteration 4 of " + dir / "restarted")) << log;
  EXPECT_TRUE(contains(log, "successfully loaded checkpoint from " + dir / "restarted" + " at iteration 4")) << log;
  EXPECT_EQ(count_of(log, "restart 2 of 2"), 0u) << log;
  EXPECT_GT(training_pid(log, 1), 0) << log;
  // Resuming is deterministic: the same losses at every iteration, the same final weights.
  const std::map<int64_t, std::string> want = logged_losses(plain.output), got = logged_losses(log);
  ASSERT_EQ(want.size(), 8u) << plain.output;
  EXPECT_EQ(got, want);
  expect_same_checkpoint(dir / "plain", dir / "restarted", 8);
}

TEST(AutoRestart, OutOfRestartsExitsWithTheFailure) {
  TempDir dir("auto_restart_out");
  {  // N = 0: supervised, never restarted
    const ScopedEnv fault("TROUPE_FAULT_AT_ITERATION", "2");
    const Outcome o = run_troupe(tiny_train_args(4, {"--save", dir / "zero", "--auto-restart", "0"}), dir / "zero.txt");
    EXPECT_EQ(o.code, std::optional<int>(1)) << o.output;
    EXPECT_TRUE(contains(o.output, "out of restarts (--auto-restart 0)")) << o.output;
    EXPECT_EQ(count_of(o.output, "restart 1 of"), 0u) << o.output;
  }
  // A failure each restart repeats (a missing --load directory): two starts, then the status.
  const Outcome o =
      run_troupe(tiny_train_args(4, {"--save", dir / "again", "--load", dir / "missing", "--auto-restart", "1"}),
                 dir / "again.txt");
  EXPECT_EQ(o.code, std::optional<int>(1)) << o.output;
  EXPECT_EQ(count_of(o.output, "started (restart "), 2u) << o.output;
  EXPECT_TRUE(contains(o.output, "restart 1 of 1: ")) << o.output;
  EXPECT_TRUE(contains(o.output, "no checkpoint of this run in " + dir / "again")) << o.output;
  EXPECT_TRUE(contains(o.output, "out of restarts (--auto-restart 1)")) << o.output;
  EXPECT_TRUE(contains(o.output, "no checkpoint directory")) << o.output;
}

TEST(AutoRestart, KilledProcessIsRestartedAndSigtermToTheSupervisorIsNot) {
  TempDir dir("auto_restart_kill");
  const std::string save = dir / "ckpt";
  Troupe t(tiny_train_args(1000000, {"--save", save, "--save-interval", "2", "--auto-restart", "3"}), dir / "out.txt");
  const pid_t first = training_pid(t.await_output("started (restart 0 of 3)", 60s), 0);
  ASSERT_GT(first, 0) << t.output();
  t.await_output("successfully saved checkpoint from iteration", 120s);
  ASSERT_EQ(::kill(first, SIGKILL), 0) << std::strerror(errno);
  std::string log = t.await_output("started (restart 1 of 3)", 60s);
  EXPECT_TRUE(contains(log, "was killed by signal 9 (SIGKILL")) << log;
  EXPECT_TRUE(contains(log, "resuming from iteration ")) << log;
  const pid_t second = training_pid(log, 1);
  ASSERT_GT(second, 0) << log;
  EXPECT_NE(second, first);
  log = t.await_output("successfully loaded checkpoint from " + save, 120s);
  // Training again after the restart, then SIGTERM to the supervisor: forwarded, no restart.
  const size_t loaded = log.find("successfully loaded checkpoint");
  while (!std::regex_search(log.substr(loaded), std::regex(R"(iteration\s+\d+/)"))) {
    ASSERT_EQ(t.wait(100ms), std::nullopt) << log;
    log = t.output();
  }
  t.signal(SIGTERM);
  EXPECT_EQ(t.wait(120s), std::optional<int>(130)) << t.output();
  log = t.output();
  EXPECT_TRUE(contains(log, "troupe train: stopped by signal 15")) << log;
  EXPECT_TRUE(contains(log, "stopped by signal 15: the training process")) << log;
  EXPECT_EQ(count_of(log, "restart 2 of 3"), 0u) << log;
  EXPECT_EQ(::kill(second, 0), -1) << "the training process outlived its supervisor";
}

TEST(AutoRestart, RefusedWithoutSaveAndUnderMpirun) {
  TempDir dir("auto_restart_refused");
  const Outcome no_save = run_troupe(tiny_train_args(2, {"--auto-restart", "1"}), dir / "no_save.txt");
  EXPECT_EQ(no_save.code, std::optional<int>(2)) << no_save.output;
  EXPECT_TRUE(contains(no_save.output, "--auto-restart requires --save")) << no_save.output;

  const ScopedEnv mpirun("OMPI_COMM_WORLD_SIZE", "2");  // what mpirun sets for each rank
  const Outcome o = run_troupe(tiny_train_args(2, {"--save", dir / "ckpt", "--auto-restart", "1"}), dir / "mpi.txt");
  EXPECT_EQ(o.code, std::optional<int>(1)) << o.output;
  EXPECT_TRUE(contains(o.output, "--auto-restart cannot restart one process of a run launched by mpirun")) << o.output;
  EXPECT_FALSE(contains(o.output, "started (restart")) << o.output;
}

}  // namespace
}  // namespace troupe::test
