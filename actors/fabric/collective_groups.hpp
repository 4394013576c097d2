// The backends behind troupe::Collectives (kernels/collectives.hpp). A group is made once, up
// front, and hands out one endpoint per member; member i's endpoint is then used only from the
// thread that drives member i's device.
//
//   auto group = make_cpu_group(4);                 // four CPU devices of this process
//   std::thread t([&] { group[1]->all_reduce(cpu, grad1); });
//   group[0]->all_reduce(cpu, grad0);               // returns once every member has arrived
//
// Groups that span processes, and GPU (NCCL) groups, come from a Fabric (actors/fabric/fabric.hpp);
// make_cpu_group is the one-process case of the same mechanism.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kernels/collectives.hpp"

namespace troupe::actors {

struct GroupOptions {
  std::string name = "group";  // names the group in errors ("tp group 1 of stage 0")
  // A member that waits longer than this for the others throws troupe::Error naming the
  // collective and the members that never arrived (a run must fail, not hang).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // NCCL groups with several members in this process: the local members enter each collective
  // together (a host barrier before each launch). Without it a member's device can wait in a
  // collective for a peer whose thread is blocked in a CUDA call that waits for a device to
  // drain (e.g. a kernel module's first, lazy load, which holds the driver's lock while it
  // waits), and the group deadlocks. For members that run in lockstep on threads of their own
  // (inference tensor parallelism); no cost when steps replay as CUDA graphs.
  bool launch_together = false;
};

// `size` CPU members in this process (threads, shared memory). CPU collectives block until
// every member has arrived; sums run in member order, so every member gets bitwise identical
// results. Dtypes: all_reduce and reduce_scatter take f32, i32 and i64 (sum and max);
// all_gather, broadcast, all_to_all and all_to_all_v move bytes of any dtype.
std::vector<std::unique_ptr<Collectives>> make_cpu_group(int size, const GroupOptions& options = {});

}  // namespace troupe::actors
