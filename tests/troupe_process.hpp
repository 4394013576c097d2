// A `troupe` command running as a child process (tests of the command line end to end), its
// stdout and stderr in one file. Killed with SIGKILL if still running when destroyed.
//
//   TroupeProcess t({"train", "--mock-data", ...}, dir / "out.txt");
//   t.await_output("iteration        2/", 30s);
//   t.signal(SIGKILL);
//   std::optional<int> code = t.wait(10s);   // 128 + signal when killed
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace troupe::test {

class TroupeProcess {
 public:
  TroupeProcess(const std::vector<std::string>& args, std::string output_path);
  ~TroupeProcess();
  TroupeProcess(const TroupeProcess&) = delete;
  TroupeProcess& operator=(const TroupeProcess&) = delete;

  std::string output() const;
  void signal(int sig) const;
  // The exit code once it exits within `limit` (128 + signal when killed); nullopt if it runs on.
  std::optional<int> wait(std::chrono::milliseconds limit);
  // Waits until the output contains `text`; returns the output (a test failure if it never does).
  std::string await_output(const std::string& text, std::chrono::milliseconds limit);

 private:
  std::string output_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// The whole file as a string ("" if it cannot be read).
std::string read_text_file(const std::string& path);

}  // namespace troupe::test
