// Liveness between the processes of a run. A process that dies closes its connections and its
// actors' down messages end the run at once; a process that is stopped (SIGSTOP), swapped out
// or wedged keeps them open and would be noticed only at --op-timeout. So every process pings
// the stage directory of each lower-numbered one every `period` (the directories answer and
// note who pinged), and each trainer's watchdog fails the run when some other process has
// been silent for longer than --heartbeat-timeout.
//
//   auto board = std::make_shared<HeartbeatBoard>(processes, me);
//   directory handles (heartbeat_atom, int from) -> int by board->saw(from);
//   caf::actor pinger = spawn_heartbeat(system, board, lower_directories, me, 1s);
//   if (auto q = board->silent_for(now, timeout)) fail("process " q.process " silent for ...");
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/train/protocols.hpp"

namespace troupe::actors {

// When each other process was last heard from (a ping it sent, or its answer to ours).
class HeartbeatBoard {
 public:
  using Clock = std::chrono::steady_clock;
  HeartbeatBoard(int processes, int me);

  void saw(int process);
  struct Silent {
    int process = -1;
    Clock::duration for_how_long{};
  };
  // The process silent longest, if that is longer than `timeout`.
  std::optional<Silent> silent_for(Clock::time_point now, Clock::duration timeout) const;
  // The run's error for that process ("process 2 has not been heard from for ..."), or "".
  std::string silence_error(Clock::time_point now, Clock::duration timeout) const;

 private:
  const int me_;
  mutable std::mutex mu_;
  std::vector<Clock::time_point> last_;  // per process
};

// Pings each (process, directory) in `lower` every `period` and notes the answers on `board`.
caf::actor spawn_heartbeat(caf::actor_system& system, std::shared_ptr<HeartbeatBoard> board,
                           std::vector<std::pair<int, stage_directory_actor>> lower, int me,
                           std::chrono::milliseconds period);

}  // namespace troupe::actors
