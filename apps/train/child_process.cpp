#include "apps/train/child_process.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "base/check.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace troupe::apps {

namespace {

std::atomic<pid_t> g_child{0};      // the child running now; 0: none
std::atomic<int> g_stop_signal{0};  // the last SIGINT/SIGTERM this process got
constexpr size_t kMaxLine = 4096;   // of stderr kept while looking for the end of a line

extern "C" void forward_stop_signal(int sig) {
  const int saved_errno = errno;  // only async-signal-safe calls here
  g_stop_signal = sig;
  const pid_t child = g_child.load();
  if (child > 0) ::kill(child, sig);
  errno = saved_errno;
}

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// This process's environment with `overrides` ("NAME=VALUE") in place of the same names.
std::vector<std::string> merged_environment(const std::vector<std::string>& overrides) {
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const std::string& o : overrides) replaced = replaced || name_of(o) == name_of(kv);
    if (!replaced) out.push_back(kv);
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& words) {
  std::vector<char*> out;
  out.reserve(words.size() + 1);
  for (std::string& w : words) out.push_back(w.data());
  out.push_back(nullptr);
  return out;
}

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our stderr is gone: the child's lines have nowhere to go
    data += n;
    size -= size_t(n);
  }
}

// Copies the child's stderr (the pipe's read end `fd`) to ours until it closes, keeping its last
// line that reports an error in `last_error`.
void copy_stderr(int fd, std::string& last_error) {
  std::string line;
  char buf[4096];
  auto end_line = [&] {
    if (line.find("error: ") != std::string::npos) last_error = line;
    line.clear();
  };
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    write_all(STDERR_FILENO, buf, size_t(n));
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n')
        end_line();
      else if (line.size() < kMaxLine)
        line += buf[i];
    }
  }
  end_line();
  ::close(fd);
}

// Ends a child that will not be waited for (best effort: it may be gone already).
void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) == -1 && errno == EINTR) {}
  g_child = 0;
}

// In the forked child, before exec: only async-signal-safe calls. Never returns.
[[noreturn]] void exec_child(int stderr_fd, pid_t parent, const sigset_t& mask, char** argv, char** envp) {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  if (::dup2(stderr_fd, STDERR_FILENO) == -1 || ::prctl(PR_SET_PDEATHSIG, SIGTERM) == -1 ||
      ::sigaction(SIGINT, &dfl, nullptr) == -1 || ::sigaction(SIGTERM, &dfl, nullptr) == -1)
    ::_exit(127);
  if (::getppid() != parent) ::_exit(127);  // the supervisor died before PR_SET_PDEATHSIG took
  if (::sigprocmask(SIG_SETMASK, &mask, nullptr) == -1) ::_exit(127);
  ::execve("/proc/self/exe", argv, envp);
  static const char kMessage[] = "troupe: error: --auto-restart could not start /proc/self/exe again\n";
  write_all(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  ::_exit(127);
}

}  // namespace

std::string ChildExit::describe() const {
  if (signal == 0) return str_cat("exited with status ", exit_code);
  const char* abbrev = sigabbrev_np(signal);
  return str_cat("was killed by signal ", signal, " (", abbrev != nullptr ? "SIG" : "", abbrev != nullptr ? abbrev : "",
                 abbrev != nullptr ? ": " : "", strsignal(signal), ")");
}

void forward_stop_signals() {
  struct sigaction sa = {};
  sa.sa_handler = forward_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid returns EINTR and goes on waiting
  TROUPE_SYSCALL(::sigaction(SIGINT, &sa, nullptr), "--auto-restart: installing the SIGINT handler");
  TROUPE_SYSCALL(::sigaction(SIGTERM, &sa, nullptr), "--auto-restart: installing the SIGTERM handler");
}

int stop_signal_received() { return g_stop_signal.load(); }

ChildProcess::ChildProcess(const std::vector<std::string>& args, const std::vector<std::string>& env)
    : last_error_(std::make_shared<std::string>()) {
  TROUPE_CHECK(!args.empty(), "ChildProcess: no program name");
  std::vector<std::string> argv_words = args, env_words = merged_environment(env);
  std::vector<char*> argv = c_strings(argv_words), envp = c_strings(env_words);
  int fds[2] = {-1, -1};
  TROUPE_SYSCALL(::pipe2(fds, O_CLOEXEC), "--auto-restart: a pipe for the training process's stderr");
  // SIGINT/SIGTERM wait until the child's pid is known, so that they reach it; the copier
  // thread keeps them blocked for good (the main thread handles them).
  const sigset_t stop = stop_signals();
  sigset_t old;
  const int masked = ::pthread_sigmask(SIG_BLOCK, &stop, &old);
  TROUPE_CHECK(masked == 0, "--auto-restart: blocking SIGINT/SIGTERM failed: ", std::strerror(masked));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(fds[1], parent, old, argv.data(), envp.data());
  const int fork_errno = errno;
  ::close(fds[1]);
  if (pid == -1) {
    ::close(fds[0]);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    errno = fork_errno;
    TROUPE_SYSCALL(-1, "--auto-restart: fork for the training process");
  }
  pid_ = pid;
  g_child = pid;
  try {
    stderr_copier_ = std::thread([fd = fds[0], out = last_error_] { copy_stderr(fd, *out); });
  } catch (...) {  // no thread: the child must not run on unsupervised
    kill_and_reap(pid_);
    ::close(fds[0]);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  const int unmasked = ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  TROUPE_CHECK(unmasked == 0, "--auto-restart: unblocking SIGINT/SIGTERM failed: ", std::strerror(unmasked));
  // A stop signal that came before the pid was known: the child gets it now.
  if (const int sig = g_stop_signal.load(); sig != 0) ::kill(pid_, sig);
}

ChildProcess::~ChildProcess() {
  if (!waited_) kill_and_reap(pid_);
  if (stderr_copier_.joinable()) stderr_copier_.join();
}

ChildExit ChildProcess::wait() {
  int status = 0;
  for (;;) {
    if (::waitpid(pid_, &status, 0) != -1) break;
    if (errno != EINTR) TROUPE_SYSCALL(-1, "--auto-restart: waiting for the training process ", pid_);
  }
  waited_ = true;
  g_child = 0;
  stderr_copier_.join();  // the pipe closes once the child (and whatever inherited it) is gone
  ChildExit e;
  if (WIFSIGNALED(status))
    e.signal = WTERMSIG(status);
  else
    e.exit_code = WEXITSTATUS(status);
  e.last_error = *last_error_;
  return e;
}

}  // namespace troupe::apps
