// The point-to-point layer under the Fabric (internal to actors/): tagged, non-blocking byte
// transfers between the processes of a run, on numbered communicators. Two backends: MPI (under
// mpirun, mpi_links.hpp) and TCP (torchrun's or Slurm's variables, tcp_links.hpp). The host
// helpers, the groups of CPU devices spanning processes and the CPU channels between processes
// are written once, over this interface.
//
// Messages from one process to another on one (communicator, tag) arrive in send order; a
// receive names its length, and a message of another length fails it. A request set is waited
// on with a deadline and a stop predicate, and names the peers that never completed.
//
//   const int comm = links.new_communicator();   // every process, in the same order
//   auto rq = links.requests();
//   rq->send(comm, mine.data(), n, peer, /*tag=*/7, /*label=*/peer);
//   rq->recv(comm, theirs.data(), n, peer, 7, peer);
//   std::vector<int> late;
//   if (!rq->wait_until(deadline, [&] { return aborted; }, late)) fail(...late...);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace troupe::actors {

// Transfers in flight, used from one thread at a time.
class LinkRequests {
 public:
  virtual ~LinkRequests() = default;  // implementations abandon() what is still in flight

  // `label` names the peer in wait_until's report (a group member, a process). The buffer
  // belongs to the transfer until it completes or is abandoned.
  virtual void send(int comm, const void* data, int64_t bytes, int dest, int tag, int label) = 0;
  virtual void recv(int comm, void* data, int64_t bytes, int source, int tag, int label) = 0;

  virtual bool empty() const = 0;
  // Completes what has finished without waiting; true when nothing is left in flight. A
  // transfer that failed (a length mismatch, a peer that went away) throws troupe::Error.
  virtual bool test() = 0;
  // true once every transfer has completed; false at the deadline or when stop() returns true,
  // with the labels of the unfinished transfers in `unfinished` (sorted, unique). Failures
  // throw as in test(), as soon as they happen.
  virtual bool wait_until(std::chrono::steady_clock::time_point deadline, const std::function<bool()>& stop,
                          std::vector<int>& unfinished) = 0;
  // Gives up on what is in flight (a failed run). MPI may still touch the buffers afterwards
  // (the caller keeps them); TCP never does.
  virtual void abandon() = 0;
};

// The links of one process to all others of the run.
class ProcessLinks {
 public:
  virtual ~ProcessLinks() = default;

  virtual const char* name() const = 0;  // "MPI", "TCP": for logs and errors
  virtual int process() const = 0;       // 0 .. processes() - 1
  virtual int processes() const = 0;
  virtual int node_process() const = 0;  // this process's index among those on its machine
  virtual int max_tag() const = 0;       // the largest tag a transfer may carry
  // A communicator of its own (a numbered space of tags). Every process makes its
  // communicators in the same order; 0 and 1 exist from the start (the Fabric's control and
  // channel communicators).
  virtual int new_communicator() = 0;
  virtual std::unique_ptr<LinkRequests> requests() = 0;
  // The run failed: the end need not wait for the other processes (one may be stopped or gone,
  // and waiting for it would hold this process forever).
  virtual void end_without_waiting() = 0;
};

}  // namespace troupe::actors
