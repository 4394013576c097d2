// The Fabric's host-side helpers over processes (internal to actors/): all-reduce, all-gather,
// broadcast and barrier of host values, point-to-point over the process links (MPI or TCP) on
// one communicator. Every process calls them from one thread, all in the same order. Each
// process sends its part to every other and reduces in process order, so every process gets
// the same bits. They wait as long as it takes, but a transfer failing (over TCP: a process
// that went away) throws at once, and so does `watch` returning a reason (a process that is
// alive but silent: stopped or wedged; see Fabric::watch_peers).
//
//   std::vector<std::string> hosts = host_all_gather(links, kControl, my_host);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/fabric/process_links.hpp"
#include "kernels/collectives.hpp"

namespace troupe::actors {

// Polled while a helper waits: empty while every process is well, else why the wait ends.
using PeerWatch = std::function<std::string()>;

void host_all_reduce(ProcessLinks& links, int comm, std::vector<double>& values, ReduceOp op,
                     const PeerWatch& watch = {});
void host_barrier(ProcessLinks& links, int comm, const PeerWatch& watch = {});
std::vector<std::string> host_all_gather(ProcessLinks& links, int comm, const std::string& mine,
                                         const PeerWatch& watch = {});  // [process]
void host_broadcast(ProcessLinks& links, int comm, std::vector<uint8_t>& bytes, int root,
                    const PeerWatch& watch = {});  // resized on receivers

}  // namespace troupe::actors
