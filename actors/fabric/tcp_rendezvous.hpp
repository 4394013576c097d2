// The start of a run launched by torchrun or srun (internal to actors/): the processes find
// each other over TCP and connect in a full mesh. Process 0 listens on MASTER_ADDR:MASTER_PORT;
// every other process listens on a port of its own, connects to process 0 (retrying until the
// rendezvous timeout) and says its rank, run size and port; process 0 checks that every rank
// comes once and that the sizes agree, then hands out every process's address; each process
// then connects to the lower-numbered ones and accepts the higher-numbered ones.
//
//   std::vector<UniqueFd> peers = tcp_rendezvous(read_launch_env());   // [process], -1 here
#pragma once

#include <vector>

#include "actors/fabric/launch_env.hpp"
#include "actors/fabric/tcp_socket.hpp"

namespace troupe::actors {

// The connected sockets to every other process of the run ([process]; empty at env.rank).
std::vector<UniqueFd> tcp_rendezvous(const LaunchEnv& env);

}  // namespace troupe::actors
