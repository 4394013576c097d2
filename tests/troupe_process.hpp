// The built `troupe` command as a child process, for tests that run it as a user would
// (tests/apps/monitor_*_test.cpp): stdout and stderr go to one file the test reads.
//
//   Troupe train({"train", "--device", "cpu", ...}, dir / "train.log");
//   std::string log = train.await_output("monitor: publishing on ", 60s);
//   train.signal(SIGTERM);
//   EXPECT_EQ(train.wait(60s), std::optional<int>(130));
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe::test {

class Troupe {
 public:
  // Starts troupe_binary() with `args`; its output goes to the file `output`.
  Troupe(const std::vector<std::string>& args, std::string output);
  // `launcher` (looked up in PATH) runs troupe_binary() with `args`: {"mpirun", "-np", "2"}.
  Troupe(const std::vector<std::string>& launcher, const std::vector<std::string>& args, std::string output);
  ~Troupe();  // kills it (SIGKILL) if it still runs
  Troupe(const Troupe&) = delete;
  Troupe& operator=(const Troupe&) = delete;

  std::string output() const;
  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // The exit code once it exits within `limit` (128 + signal when killed); nullopt if it runs on.
  std::optional<int> wait(std::chrono::milliseconds limit);
  // Waits until the output contains `text` (a test failure if it exits or `limit` passes
  // first); returns the output.
  std::string await_output(const std::string& text, std::chrono::milliseconds limit);

 private:
  std::string output_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// How a run of `troupe` to its end went: its exit code (nullopt when it ran past the limit, then it
// is killed) and what it printed on stdout and stderr.
struct TroupeExit {
  std::optional<int> code;
  std::string output;
};
// Runs troupe_binary() with `args` (after `launcher`, e.g. {"bash", script}) until it exits or
// `limit` passes; its output goes to a file in a fresh TempDir named after `tag`.
TroupeExit run_to_exit(const std::vector<std::string>& args, const std::string& tag,
                       std::chrono::milliseconds limit = std::chrono::seconds(60));
TroupeExit run_to_exit(const std::vector<std::string>& launcher, const std::vector<std::string>& args,
                       const std::string& tag, std::chrono::milliseconds limit);

// The name the inference branch's tests use (tests/apps/generate_command_test.cpp).

// `troupe train` of the tiny GPT-2 on random tokens, on the CPU: sequence 32, one sample per
// iteration, `iters` iterations, no evaluation, a log line every iteration; then `extra`.
std::vector<std::string> tiny_train_args(int64_t iters, const std::vector<std::string>& extra);
// `troupe train` on tiny_train_args(1, flags) must stop before its first iteration with a
// non-zero exit and an output containing `named` (a refused flag combination); test failures
// otherwise.
void expect_train_refused(const std::vector<std::string>& flags, const std::string& named, const std::string& tag);
// The first `docs` documents of the bundled Moby-Dick corpus preprocessed (GPT-2 BPE, an EOD after
// each) into the folder `dir`; returns the --data-path prefix. Throws (troupe::Error) with the
// command's output if it fails.
std::string preprocess_moby_dick(const std::string& dir, int docs);
// `troupe train` of `model` on that data (under `dir`) on CPU devices: sequence 32, micro-batch 2,
// global batch 4, `iters` iterations at learning rate `lr`, no evaluation, a log line every
// iteration; then `extra`.
std::vector<std::string> moby_dick_train_args(const std::string& dir, const std::string& model, int64_t iters,
                                              const std::string& lr, const std::vector<std::string>& extra);
// The lm loss `troupe train` printed for each logged iteration, as printed (so equal means bit
// for bit at the printed precision).
std::map<int64_t, std::string> logged_losses(const std::string& log);

// The launcher {"mpirun", "-np", np} for Troupe, with OpenMPI's variables set that let it run as
// root and start more processes than cores (CI machines); nullopt when mpirun is not on PATH
// (the test skips).
std::optional<std::vector<std::string>> mpirun_launcher(int np);

// A whole file's bytes ("" when it cannot be read).
std::string read_file(const std::string& path);
// What `troupe train` printed: "monitor: publishing on ENDPOINT (attach with: ...)"; "" if not.
std::string published_endpoint(const std::string& log);
// The port of the "http://127.0.0.1:PORT" troupe train printed for --metrics-port; -1 if none.
int metrics_port(const std::string& log);

}  // namespace troupe::test
