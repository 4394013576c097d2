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

// One round of the clock exchange, on the asking process's clock except `peer_ns`: it sent at
// `send_ns`, process 0 read its clock (`peer_ns`) on receipt and answered, the answer came
// back at `recv_ns`.
struct ClockSample {
  int64_t send_ns = 0, peer_ns = 0, recv_ns = 0;
};
// Process 0's clock minus this process's, and the round trip of the exchange it comes from.
struct ClockOffset {
  int64_t offset_ns = 0, rtt_ns = 0;
};
// The estimate from the round of least round trip (the one least disturbed by scheduling):
// offset = peer - (send + rtt / 2), i.e. process 0 read its clock halfway through the round.
ClockOffset clock_offset_estimate(const std::vector<ClockSample>& samples);
// Every process, at the same point: each process p > 0 in turn exchanges `rounds` pings with
// process 0 (which reads `now_ns` as it answers) and returns clock_offset_estimate(); process 0
// returns {0, 0}. `now_ns`: the clock to align (e.g. ns since the process's trace epoch).
ClockOffset host_clock_offset(ProcessLinks& links, int comm, const std::function<int64_t()>& now_ns, int rounds,
                              const PeerWatch& watch = {});

}  // namespace troupe::actors
