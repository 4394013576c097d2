// Non-blocking MPI transfers in flight, waited for with a deadline (internal to actors/; the
// MPI backend's LinkRequests, process_links.hpp). Waiting polls MPI_Testsome, which also drives
// MPI's progress, and gives up at the deadline or when `stop` says so, reporting which peers
// never completed: a collective or a channel fails with a message instead of hanging in MPI_Wait.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/fabric/process_links.hpp"

namespace troupe::actors {

class MpiLinks;

class MpiRequests final : public LinkRequests {
 public:
  // `links` (which maps communicator ids to MPI communicators) outlives the requests.
  explicit MpiRequests(const MpiLinks& links) : links_(links) {}
  MpiRequests(const MpiRequests&) = delete;
  MpiRequests& operator=(const MpiRequests&) = delete;
  ~MpiRequests() override;  // abandon()s what is still in flight

  // Messages over 1 GiB go as several (the same tag keeps them in order).
  void send(int comm, const void* data, int64_t bytes, int dest, int tag, int label) override;
  void recv(int comm, void* data, int64_t bytes, int source, int tag, int label) override;

  bool empty() const override { return requests_.empty(); }
  bool test() override;
  bool wait_until(std::chrono::steady_clock::time_point deadline, const std::function<bool()>& stop,
                  std::vector<int>& unfinished) override;
  // Receives are cancelled, sends left to finish or not; the buffers must then outlive MPI's
  // interest in them (the caller keeps them).
  void abandon() override;

 private:
  struct Transfer {
    int label;
    int64_t bytes;  // expected, for receives; -1 for sends
    int peer;
  };
  void reap(int index, const MPI_Status& status);

  const MpiLinks& links_;
  std::vector<MPI_Request> requests_;
  std::vector<Transfer> transfers_;
};

}  // namespace troupe::actors
