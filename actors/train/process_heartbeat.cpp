#include "actors/train/process_heartbeat.hpp"

#include "actors/train/messages.hpp"
#include "base/check.hpp"

namespace troupe::actors {

HeartbeatBoard::HeartbeatBoard(int processes, int me) : me_(me), last_(size_t(processes), Clock::now()) {}

void HeartbeatBoard::saw(int process) {
  std::lock_guard lock(mu_);
  if (process >= 0 && size_t(process) < last_.size()) last_[size_t(process)] = Clock::now();
}

std::optional<HeartbeatBoard::Silent> HeartbeatBoard::silent_for(Clock::time_point now, Clock::duration timeout) const {
  std::lock_guard lock(mu_);
  std::optional<Silent> worst;
  for (size_t q = 0; q < last_.size(); ++q) {
    if (int(q) == me_) continue;
    const Clock::duration quiet = now - last_[q];
    if (quiet > timeout && (!worst || quiet > worst->for_how_long)) worst = Silent{int(q), quiet};
  }
  return worst;
}

std::string HeartbeatBoard::silence_error(Clock::time_point now, Clock::duration timeout) const {
  const std::optional<Silent> silent = silent_for(now, timeout);
  if (!silent) return "";
  const auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  return str_cat("process ", silent->process, " has not been heard from for ", ms(silent->for_how_long),
                 " ms (heartbeat timeout ", ms(timeout),
                 " ms): it is stopped, wedged or unreachable; the run ends here");
}

caf::actor spawn_heartbeat(caf::actor_system& system, std::shared_ptr<HeartbeatBoard> board,
                           std::vector<std::pair<int, stage_directory_actor>> lower, int me,
                           std::chrono::milliseconds period) {
  return system.spawn([board, lower, me, period](caf::event_based_actor* self) -> caf::behavior {
    self->send(self, tick_atom::value, uint64_t(0));
    return {[=](tick_atom, uint64_t) {
      for (const auto& [q, directory] : lower)
        self->request(directory, period * 4, heartbeat_atom::value, me)
            .then([board, q = q](int) { board->saw(q); }, [](caf::error&) {});  // silence is the signal
      self->delayed_send(self, period, tick_atom::value, uint64_t(0));
    }};
  });
}

}  // namespace troupe::actors
