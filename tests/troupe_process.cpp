#include "tests/troupe_process.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "kernels/check.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {

using Clock = std::chrono::steady_clock;

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TroupeProcess::TroupeProcess(const std::vector<std::string>& args, std::string output_path)
    : output_(std::move(output_path)) {
  std::vector<std::string> all{troupe_binary()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  TROUPE_SYSCALL(pid_, "fork for ", all[0]);
  if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
    const int fd = ::open(output_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
}

TroupeProcess::~TroupeProcess() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string TroupeProcess::output() const { return read_text_file(output_); }

void TroupeProcess::signal(int sig) const { ::kill(pid_, sig); }

std::optional<int> TroupeProcess::wait(std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!status_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    else if (Clock::now() > deadline) return std::nullopt;
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status_;
}

std::string TroupeProcess::await_output(const std::string& text, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    std::string out = output();
    if (out.find(text) != std::string::npos) return out;
    if (Clock::now() > deadline || wait(std::chrono::milliseconds(0))) {
      ADD_FAILURE() << "no \"" << text << "\" in the output of troupe:\n" << out;
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace troupe::test
