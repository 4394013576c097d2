// The training process that `troupe train --auto-restart` (apps/train/supervisor.hpp) runs: this
// same program (/proc/self/exe) started again with other arguments. Its stdout is ours; its
// stderr passes through a pipe, copied to ours as it comes, so the supervisor can name the last
// error line it printed. It gets SIGTERM if the supervisor dies (a run never outlives its
// supervisor). SIGINT and SIGTERM sent to the supervisor are forwarded to it.
//
//   forward_stop_signals();                              // once, before the first start
//   ChildProcess child(args, {"TROUPE_RESTART_COUNT=0"});
//   const ChildExit e = child.wait();                    // e.status(): 0, 1, 130, 128 + signal ...
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace troupe::apps {

// How a child process ended.
struct ChildExit {
  int exit_code = -1;      // its exit status when it exited; -1 when a signal killed it
  int signal = 0;          // the signal that killed it; 0 when it exited
  std::string last_error;  // its last stderr line with "error: " in it; "" if none

  int status() const { return signal != 0 ? 128 + signal : exit_code; }  // as a shell reports it
  std::string describe() const;  // "exited with status 1", "was killed by signal 9 (Killed)"
};

// From now on SIGINT and SIGTERM to this process are not acted on but forwarded to the child
// process running at the time (or to the next one started, if none runs).
void forward_stop_signals();
// The stop signal this process got since forward_stop_signals(); 0 if none.
int stop_signal_received();

class ChildProcess {
 public:
  // Starts /proc/self/exe with `args` (args[0] is its name) and this process's environment plus
  // `env` ("NAME=VALUE", replacing a variable of that name). Throws when it cannot start.
  ChildProcess(const std::vector<std::string>& args, const std::vector<std::string>& env);
  ~ChildProcess();  // kills it (SIGKILL) if it was never waited for
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Waits until it exits and its stderr is copied.
  ChildExit wait();

 private:
  pid_t pid_ = -1;
  bool waited_ = false;
  std::thread stderr_copier_;
  std::shared_ptr<std::string> last_error_;  // written by the copier until it ends
};

}  // namespace troupe::apps
