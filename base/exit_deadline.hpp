// A last resort against a process that cannot finish: while an ExitDeadline is alive, a thread
// waits; if the deadline passes first, it writes `message` as an error and ends the process
// with exit status 1 (std::_Exit: no destructors, which may be what is stuck). Destroying the
// ExitDeadline in time disarms it.
//
//   ExitDeadline guard(std::chrono::seconds(30), "the shutdown after the failure is stuck");
//   shutdown();  // may wait forever on a wedged device; the guard ends the process instead
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace troupe {

class ExitDeadline {
 public:
  ExitDeadline(std::chrono::milliseconds limit, std::string message);
  ~ExitDeadline();  // disarms
  ExitDeadline(const ExitDeadline&) = delete;
  ExitDeadline& operator=(const ExitDeadline&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread waiter_;
};

}  // namespace troupe
