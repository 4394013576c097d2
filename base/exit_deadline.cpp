#include "base/exit_deadline.hpp"

#include <cstdio>
#include <cstdlib>

#include "base/log.hpp"

namespace troupe {

ExitDeadline::ExitDeadline(std::chrono::milliseconds limit, std::string message) {
  waiter_ = std::thread([this, limit, message = std::move(message)] {
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, limit, [this] { return disarmed_; })) return;
    logger("process").error(message);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  });
}

ExitDeadline::~ExitDeadline() {
  {
    std::lock_guard lock(mu_);
    disarmed_ = true;
  }
  cv_.notify_all();
  waiter_.join();
}

}  // namespace troupe
