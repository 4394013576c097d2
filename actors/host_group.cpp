#include "actors/host_group.hpp"

#include <algorithm>

#include "kernels/check.hpp"

namespace troupe::actors {

namespace {

std::string describe(const StepDesc& d) {
  return str_cat(d.op, " #", d.seq, " (", d.bytes, " bytes, detail ", d.detail, ")");
}

}  // namespace

HostGroup::HostGroup(int size, std::string name, std::chrono::milliseconds timeout)
    : size_(size), name_(std::move(name)), timeout_(timeout), arrived_(size_t(size), 0), slots_(size_t(size)) {
  TROUPE_CHECK(size >= 1, "collective group '", name_, "': size ", size);
}

std::string HostGroup::step_name(const StepDesc& d) const {
  return str_cat("group '", name_, "' (", size_, " members): ", d.op, " #", d.seq);
}

void HostGroup::throw_failure_locked() { throw Error(failure_); }

void HostGroup::barrier(int member, const StepDesc& desc, const char* what) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!failure_.empty()) throw_failure_locked();
  arrived_[size_t(member)] = 1;
  if (++arrived_count_ == size_) {
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), 0);
    ++generation_;
    cv_.notify_all();
    return;
  }
  const uint64_t generation = generation_;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (generation_ == generation && failure_.empty()) {
    if (cv_.wait_until(lock, deadline) != std::cv_status::timeout) continue;
    if (generation_ != generation || !failure_.empty()) break;
    std::string missing;
    for (int i = 0; i < size_; ++i)
      if (!arrived_[size_t(i)]) missing += str_cat(missing.empty() ? "" : ", ", i);
    // Breaks the group: the members already waiting hear the same error at once.
    failure_ = str_cat(step_name(desc), ": member ", member, " timed out after ",
                       std::chrono::duration<double>(timeout_).count(), " s ", what, "; members never arrived: ",
                       missing);
    cv_.notify_all();
  }
  if (generation_ == generation) throw_failure_locked();
}

std::vector<const std::byte*> HostGroup::begin_step(int member, const StepDesc& desc, const void* mine,
                                                    int64_t mine_bytes, const PieceFn& piece) {
  TROUPE_CHECK(member >= 0 && member < size_, "group '", name_, "': member ", member, " of ", size_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[size_t(member)] = {desc, static_cast<const std::byte*>(mine), mine_bytes};
  }
  barrier(member, desc, "waiting for the others to arrive");
  // Every member compares every member's step with member 0's, so all of them see a mismatch
  // and fail together (nobody is left waiting at the next barrier). Slots are only rewritten
  // after the end_step barrier, which needs this member, so reading them unlocked is safe.
  for (int k = 1; k < size_; ++k) {
    if (slots_[size_t(k)].desc == slots_[0].desc) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty())
      failure_ = str_cat("group '", name_, "': members called different collectives: member 0 ",
                         describe(slots_[0].desc), ", member ", k, " ", describe(slots_[size_t(k)].desc));
    cv_.notify_all();
    throw_failure_locked();
  }
  std::vector<const std::byte*> src(size_t(size_), nullptr);
  for (int k = 0; k < size_; ++k) {
    const Piece p = piece(k, member);
    if (p.bytes == 0) continue;
    const int64_t bytes = slots_[size_t(k)].bytes;
    TROUPE_CHECK(p.offset >= 0 && p.offset + p.bytes <= bytes, step_name(desc), ": piece [", p.offset, ", ",
                 p.offset + p.bytes, ") outside the ", bytes, "-byte buffer of member ", k);
    src[size_t(k)] = slots_[size_t(k)].data + p.offset;
  }
  return src;
}

void HostGroup::end_step(int member) {
  StepDesc desc;
  {
    std::lock_guard<std::mutex> lock(mu_);
    desc = slots_[size_t(member)].desc;
  }
  barrier(member, desc, "waiting for the others to finish reading");
}

void HostGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.empty()) failure_ = str_cat("group '", name_, "' aborted: ", why);
  cv_.notify_all();
}

}  // namespace troupe::actors
