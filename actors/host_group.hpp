// The meeting point of a group's CPU members (internal to actors/): a generation-counted
// barrier with a timeout, and exchange steps in which every member publishes a host buffer and
// reads pieces of the others'. The collectives (cpu_collectives.cpp) are a step or two each.
//
//   Pointers src = group.begin_step(rank, {"all_gather", seq, bytes}, in.data(), piece);
//   for (int k = 0; k < size; ++k) memcpy(out + k * n, src[k], n);   // src[k]: member k's piece
//   group.end_step(rank);             // others may now reuse the buffers they published
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace troupe::actors {

// Bytes [offset, offset + bytes) of a member's published buffer.
struct Piece {
  int64_t offset = 0;
  int64_t bytes = 0;
};
// piece(src, dst): the part of member src's buffer that member dst reads in this step. Every
// member must compute the same function.
using PieceFn = std::function<Piece(int src, int dst)>;

// What a step belongs to, for the consistency check and for errors.
struct StepDesc {
  const char* op = "";   // "all_reduce", ...
  int64_t seq = 0;       // the member's call count (every member calls in the same order)
  int64_t bytes = 0;     // the op's size (the same on every member)
  int detail = 0;        // op-specific (root, reduce op, dtype, phase)
};
// Every member of a step must pass an equal StepDesc; a mismatch is an error on every member.
inline bool operator==(const StepDesc& a, const StepDesc& b) {
  return std::string(a.op) == b.op && a.seq == b.seq && a.bytes == b.bytes && a.detail == b.detail;
}

class HostGroup {
 public:
  HostGroup(int size, std::string name, std::chrono::milliseconds timeout);
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
  // Waits for every member of this process; `what` names the wait in a timeout error.
  void barrier(int member, const StepDesc& desc, const char* what);
  [[noreturn]] void throw_failure_locked();
  std::string step_name(const StepDesc& d) const;

  const int size_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_count_ = 0;
  std::vector<char> arrived_;  // per member, in the current generation
  std::vector<Slot> slots_;    // per member: what it published in the current step
  std::string failure_;        // non-empty: the group is broken, every wait throws this
};

}  // namespace troupe::actors
