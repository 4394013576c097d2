#include "tests/troupe_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "base/check.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {

using Clock = std::chrono::steady_clock;

Troupe::Troupe(const std::vector<std::string>& args, std::string output)
    : Troupe(std::vector<std::string>{}, args, std::move(output)) {}

Troupe::Troupe(const std::vector<std::string>& launcher, const std::vector<std::string>& args, std::string output)
    : output_(std::move(output)) {
  std::vector<std::string> all = launcher;
  all.push_back(troupe_binary());
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  TROUPE_SYSCALL(pid_, "fork for ", all[0]);
  if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
    const int fd = ::open(output_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
    ::execvp(argv[0], argv.data());  // a launcher (mpirun) is looked up in PATH
    ::_exit(127);
  }
}

Troupe::~Troupe() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string Troupe::output() const { return read_file(output_); }

void Troupe::signal(int sig) const { TROUPE_SYSCALL(::kill(pid_, sig), "signal ", sig, " to troupe"); }

std::optional<int> Troupe::wait(std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!status_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    TROUPE_SYSCALL(r, "waitpid for troupe");
    if (r == pid_)
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    else if (Clock::now() > deadline)
      return std::nullopt;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status_;
}

std::string Troupe::await_output(const std::string& text, std::chrono::milliseconds limit) {
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

TroupeExit run_to_exit(const std::vector<std::string>& args, const std::string& tag, std::chrono::milliseconds limit) {
  return run_to_exit({}, args, tag, limit);
}

TroupeExit run_to_exit(const std::vector<std::string>& launcher, const std::vector<std::string>& args,
                       const std::string& tag, std::chrono::milliseconds limit) {
  TempDir dir(tag);
  Troupe t(launcher, args, dir / "out.txt");
  TroupeExit e;
  e.code = t.wait(limit);
  e.output = t.output();
  return e;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string published_endpoint(const std::string& log) {
  const std::string label = "monitor: publishing on ";
  const size_t at = log.find(label);
  if (at == std::string::npos) return "";
  const size_t start = at + label.size();
  return log.substr(start, log.find(' ', start) - start);
}

int metrics_port(const std::string& log) {
  const std::string label = "monitor: Prometheus metrics on http://127.0.0.1:";
  const size_t at = log.find(label);
  return at == std::string::npos ? -1 : std::stoi(log.substr(at + label.size()));
}

std::string preprocess_moby_dick(const std::string& dir, int docs) {
  {
    std::ifstream in(source_path("assets/corpora/moby-dick.jsonl"));
    std::ofstream out(dir + "/docs.jsonl");
    std::string line;
    for (int i = 0; i < docs && std::getline(in, line); ++i) out << line << "\n";
  }
  const TroupeExit pre = run_to_exit({"preprocess", "--input", dir + "/docs.jsonl", "--output-prefix", dir + "/moby",
                                      "--vocab-file", source_path("assets/gpt2/gpt2-vocab.json"), "--merge-file",
                                      source_path("assets/gpt2/gpt2-merges.txt"), "--append-eod"},
                                     "moby_preprocess", std::chrono::seconds(120));
  TROUPE_CHECK(pre.code == std::optional<int>(0), "preprocessing Moby-Dick failed:\n", pre.output);
  return dir + "/moby_text_document";
}

std::vector<std::string> moby_dick_train_args(const std::string& dir, const std::string& model, int64_t iters,
                                              const std::string& lr, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",
                                "--data-path",
                                dir + "/moby_text_document",
                                "--split",
                                "100,0,0",
                                "--data-cache-path",
                                dir + "/cache",
                                "--vocab-file",
                                source_path("assets/gpt2/gpt2-vocab.json"),
                                "--merge-file",
                                source_path("assets/gpt2/gpt2-merges.txt"),
                                "--model",
                                model,
                                "--seq-length",
                                "32",
                                "--device",
                                "cpu",
                                "--micro-batch-size",
                                "2",
                                "--global-batch-size",
                                "4",
                                "--train-iters",
                                std::to_string(iters),
                                "--lr",
                                lr,
                                "--eval-iters",
                                "0",
                                "--log-interval",
                                "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> tiny_train_args(int64_t iters, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",
                                "--mock-data",
                                "--model",
                                "gpt2-tiny",
                                "--device",
                                "cpu",
                                "--vocab-file",
                                source_path("assets/gpt2/gpt2-vocab.json"),
                                "--merge-file",
                                source_path("assets/gpt2/gpt2-merges.txt"),
                                "--seq-length",
                                "32",
                                "--micro-batch-size",
                                "1",
                                "--global-batch-size",
                                "1",
                                "--train-iters",
                                std::to_string(iters),
                                "--eval-iters",
                                "0",
                                "--log-interval",
                                "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::optional<std::vector<std::string>> mpirun_launcher(int np) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) return std::nullopt;
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  return std::vector<std::string>{"mpirun", "-np", std::to_string(np)};
}

std::map<int64_t, std::string> logged_losses(const std::string& log) {
  std::map<int64_t, std::string> losses;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    const size_t it = line.find("iteration "), loss = line.find("lm loss: ");
    if (it == std::string::npos || loss == std::string::npos) continue;
    losses[std::stoll(line.substr(it + 10))] = line.substr(loss + 9, line.find(' ', loss + 9) - (loss + 9));
  }
  return losses;
}

void expect_train_refused(const std::vector<std::string>& flags, const std::string& named, const std::string& tag) {
  using namespace std::chrono_literals;
  const TroupeExit o = run_to_exit(tiny_train_args(1, flags), tag, 120s);
  ASSERT_TRUE(o.code.has_value()) << o.output;
  EXPECT_NE(*o.code, 0) << o.output;
  EXPECT_NE(o.output.find(named), std::string::npos) << named << "\n" << o.output;
  EXPECT_EQ(o.output.find("iteration "), std::string::npos) << o.output;
}

}  // namespace troupe::test
