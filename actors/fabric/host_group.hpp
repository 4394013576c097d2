// The meeting point of a group's CPU members (internal to actors/): a generation-counted
// barrier with a timeout, and exchange steps in which every member publishes a host buffer and
// reads pieces of the others'. The collectives (cpu_collectives.cpp) are a step or two each.
// Members may live in several processes: the members of this process meet here and read each
// other's buffers in place; pieces of members elsewhere travel point-to-point over the process
// links (MPI or TCP, process_links.hpp) on the group's communicator (tag: source member * size +
// destination member), posted before the barrier and waited for with the same timeout.
//
//   Pointers src = group.begin_step(rank, {"all_gather", seq, bytes}, in.data(), piece);
//   for (int k = 0; k < size; ++k) memcpy(out + k * n, src[k], n);   // src[k]: member k's piece
//   group.end_step(rank);             // others may now reuse the buffers they published
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/fabric/process_links.hpp"

namespace troupe::actors {

// Bytes [offset, offset + bytes) of a member's published buffer.
struct Piece {
  int64_t offset = 0;
  int64_t bytes = 0;
};
// piece(src, dst): the part of member src's buffer that member dst reads in this step. A member
// is only asked about the pieces it sends (src is itself) and receives (dst is itself), and
// both ends of a piece must agree on it (all_to_all_v learns the other end's offsets first).
using PieceFn = std::function<Piece(int src, int dst)>;

// What a step belongs to, for the consistency check and for errors.
struct StepDesc {
  const char* op = "";  // "all_reduce", ...
  int64_t seq = 0;      // the member's call count (every member calls in the same order)
  int64_t bytes = 0;    // the op's size (the same on every member)
  int detail = 0;       // op-specific (root, reduce op, dtype, phase)
};
// Every member of a step must pass an equal StepDesc; a mismatch is an error on every member.
inline bool operator==(const StepDesc& a, const StepDesc& b) {
  return std::string(a.op) == b.op && a.seq == b.seq && a.bytes == b.bytes && a.detail == b.detail;
}

class HostGroup {
 public:
  // member_process[i]: the process of member i; `here`: this process. `links` (null when every
  // member is here) carries the pieces of members elsewhere on `comm`, the group's own
  // communicator; `owner` keeps whatever else the group needs alive.
  HostGroup(std::vector<int> member_process, int here, std::string name, std::chrono::milliseconds timeout,
            std::shared_ptr<ProcessLinks> links = nullptr, int comm = -1, std::shared_ptr<void> owner = nullptr);
  ~HostGroup();
  HostGroup(const HostGroup&) = delete;
  HostGroup& operator=(const HostGroup&) = delete;

  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // Publishes `mine` (`mine_bytes` long) and waits for every member; returns src[k] = member
  // k's piece for this member (nullptr where the piece is empty). The pointers stay valid
  // until end_step(). Throws troupe::Error on a timeout, an abort, or members disagreeing on
  // the step.
  std::vector<const std::byte*> begin_step(int member, const StepDesc& desc, const void* mine, int64_t mine_bytes,
                                           const PieceFn& piece);
  // Waits until every member has finished reading the published buffers.
  void end_step(int member);
  // Wakes every waiting member (now and later) with an error.
  void abort(const std::string& why);

 private:
  struct Slot {
    StepDesc desc;
    const std::byte* data = nullptr;
    int64_t bytes = 0;
  };
  // Transfers of one member of this process with the members elsewhere.
  struct Remote {
    std::vector<std::vector<std::byte>> inbox;   // per member elsewhere: its piece for us
    std::unique_ptr<LinkRequests> recvs, sends;  // declared after inbox: cancelled before it goes
  };
  // Waits for every member of this process; `what` names the wait in a timeout error.
  void barrier(int member, const StepDesc& desc, const char* what);
  void post_remote(int member, const void* mine, int64_t mine_bytes, const PieceFn& piece);
  void wait_remote(int member, const StepDesc& desc, LinkRequests& rq, const char* what);
  // Breaks the group with `why` (unless already broken) and throws the group's failure.
  [[noreturn]] void fail_group(const std::string& why);
  [[noreturn]] void throw_failure_locked();
  std::string step_name(const StepDesc& d) const;
  bool here(int member) const { return process_[size_t(member)] == here_; }

  const int size_;
  const std::vector<int> process_;
  const int here_;
  int local_count_ = 0;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<ProcessLinks> links_;
  const int comm_;
  const std::shared_ptr<void> owner_;
  std::vector<std::unique_ptr<Remote>> remote_;  // per member of this process (empty when all are here)
  std::atomic<bool> broken_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_count_ = 0;
  std::vector<char> arrived_;  // per member, in the current generation
  std::vector<Slot> slots_;    // per member: what it published in the current step
  std::string failure_;        // non-empty: the group is broken, every wait throws this
};

}  // namespace troupe::actors
