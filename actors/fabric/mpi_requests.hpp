// Non-blocking MPI transfers in flight, waited for with a deadline (internal to actors/).
// Waiting polls MPI_Testsome, which also drives MPI's progress, and gives up at the deadline
// or when `stop` says so, reporting which peers never completed: a collective or a channel
// fails with a message instead of hanging in MPI_Wait.
//
//   MpiRequests rq;
//   rq.recv(comm, buf, bytes, peer_process, tag, /*label=*/member);
//   std::vector<int> late;
//   if (!rq.wait_until(deadline, [&] { return aborted; }, late)) fail(...late...);
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace troupe::actors {

class MpiRequests {
 public:
  MpiRequests() = default;
  MpiRequests(const MpiRequests&) = delete;
  MpiRequests& operator=(const MpiRequests&) = delete;
  ~MpiRequests();  // abandon()s what is still in flight

  // `label` names the peer in wait_until's report. Messages over 1 GiB go as several
  // (the same tag keeps them in order).
  void send(MPI_Comm comm, const void* data, int64_t bytes, int dest, int tag, int label);
  void recv(MPI_Comm comm, void* data, int64_t bytes, int source, int tag, int label);

  bool empty() const { return requests_.empty(); }
  // Completes what has finished without waiting; true when nothing is left in flight.
  bool test();
  // true once every transfer has completed; false at the deadline or when stop() returns true,
  // with the labels of the unfinished transfers in `unfinished` (sorted, unique). A receive
  // that got a different length than posted throws troupe::Error.
  bool wait_until(std::chrono::steady_clock::time_point deadline, const std::function<bool()>& stop,
                  std::vector<int>& unfinished);
  // Gives up on what is in flight (a failed run): receives are cancelled, sends left to finish
  // or not; the buffers must then outlive MPI's interest in them (the caller keeps them).
  void abandon();

 private:
  struct Transfer {
    int label;
    int64_t bytes;  // expected, for receives; -1 for sends
    int peer;
  };
  void reap(int index, const MPI_Status& status);

  std::vector<MPI_Request> requests_;
  std::vector<Transfer> transfers_;
};

}  // namespace troupe::actors
