// The processes of a run and the links between them: one Fabric per process. Under mpirun the
// links are MPI (started with MPI_THREAD_MULTIPLE, finalized when the last reference goes);
// under torchrun or srun (their environment variables: actors/fabric/launch_env.hpp) they are
// TCP connections made at a rendezvous at MASTER_ADDR:MASTER_PORT; started any other way it is
// a one-process fabric that needs neither. The links bootstrap (NCCL ids, host helpers) and
// carry CPU data between processes; GPU data moves by NCCL. docs/launching.md is the user's page.
//
//   auto fabric = Fabric::init();
//   // every process makes every group, in the same order (ids and NCCL ids follow that order):
//   auto dp = fabric->make_group({0, 0, 1, 1}, {&ctx0, &ctx1, nullptr, nullptr});  // members 0, 1 here
//   dp[0]->all_reduce(ctx0, grad);                                                   // from ctx0's thread
//   fabric->all_reduce(losses, ReduceOp::sum);                                       // host values, per process
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/fabric/collective_groups.hpp"
#include "actors/fabric/device_services.hpp"
#include "actors/fabric/host_exchange.hpp"
#include "kernels/collectives.hpp"

namespace troupe::actors {

class ProcessLinks;

class Fabric : public std::enable_shared_from_this<Fabric> {
 public:
  // The process's fabric: MPI when launched by mpirun (OMPI_COMM_WORLD_SIZE, PMIX_RANK or
  // PMI_RANK in the environment); TCP when torchrun's (RANK, WORLD_SIZE, ...) or Slurm's
  // (SLURM_PROCID, ...) variables say so, waiting for the other processes at most
  // TROUPE_RENDEZVOUS_TIMEOUT seconds (default 300); else one process. Missing or
  // contradictory variables throw, naming the variable. While one is alive, init() returns it;
  // MPI cannot start again once finalized, so a second MPI fabric after the first is an error.
  static std::shared_ptr<Fabric> init();
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  int process() const { return process_; }  // 0 .. processes()-1 (the MPI rank, RANK, SLURM_PROCID)
  int processes() const { return processes_; }
  // This process's index among the processes on its machine (MPI_COMM_TYPE_SHARED, LOCAL_RANK,
  // SLURM_LOCALID; 0 for one process): with one process per GPU, process i of a node takes GPU i.
  int node_process() const { return node_process_; }
  bool uses_mpi() const;
  bool uses_tcp() const;

  // Host-side helpers over processes, for the trainer: each process calls them from one thread,
  // all processes in the same order. Reductions run in process order: every process gets the
  // same bits.
  void all_reduce(std::vector<double>& values, ReduceOp op);
  void barrier();
  std::vector<std::string> all_gather(const std::string& mine);  // [process] -> its string
  void broadcast(std::vector<uint8_t>& bytes, int root);         // resized on the receivers
  // Process 0's clock minus this process's, for `now_ns` (e.g. ns since the trace's epoch):
  // `rounds` round trips with process 0, the one of least round trip kept (host_clock_offset).
  // {0, 0} on process 0 and with one process.
  ClockOffset clock_offset(const std::function<int64_t()>& now_ns, int rounds = 16);
  // While a run lasts, the host helpers above also end (throwing watch()'s reason) when `watch`
  // says a process is gone although its links are open (stopped or wedged: the run's
  // heartbeats tell). An empty function: none (the default, and after the run).
  void watch_peers(std::function<std::string()> watch);
  // The run failed: ending this fabric will not wait for the other processes (sends in flight
  // given up, no MPI_Finalize, no lingering on TCP), so a stopped or wedged process cannot hold
  // this one's exit.
  void end_without_waiting();

  // A group whose member i lives in process member_process[i]; local_contexts[i] is member i's
  // context when it lives here, else null. Returns an endpoint per member, null for members
  // elsewhere. Every process calls make_group for every group of the run, in the same order
  // (also for groups without a member here). CPU contexts: members here exchange through
  // memory, with members elsewhere over the links (MPI or TCP); CUDA contexts: NCCL (one GPU
  // per member).
  std::vector<std::unique_ptr<Collectives>> make_group(const std::vector<int>& member_process,
                                                       const std::vector<const Context*>& local_contexts,
                                                       const GroupOptions& options = {});

  // A one-way link from a stage in from_process to one in to_process; each context is given
  // where its end lives (null elsewhere). Both ends here: actors::make_channel. Otherwise the
  // sending process's Channel only sends and the receiving one's only receives; the parcel
  // (shape and dtype) travels in an actor message, and receives come in send order. CPU: the
  // links (send() never waits for the receiver; the buffer is kept until the transfer is done);
  // CUDA: NCCL send/recv on a two-rank communicator. The two processes of a channel call
  // make_channel for their channels in the same order (other processes may call it too: they
  // get null). `timeout`: how long a receive waits before failing (CPU).
  std::unique_ptr<Channel> make_channel(int from_process, int to_process, const Context* from_ctx,
                                        const Context* to_ctx, bool timing = false,
                                        std::chrono::milliseconds timeout = std::chrono::minutes(5));

  struct Channels;  // the cross-process channels made so far (fabric.cpp)

 private:
  Fabric();
  int process_ = 0, processes_ = 1, node_process_ = 0;
  std::shared_ptr<ProcessLinks> links_;  // null for one process
  std::mutex watch_mu_;
  std::function<std::string()> watch_;  // watch_peers
  std::function<std::string()> watch() {
    std::lock_guard lock(watch_mu_);
    return watch_;
  }
  std::unique_ptr<Channels> channels_;
};

}  // namespace troupe::actors
