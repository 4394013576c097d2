#include "actors/fabric/host_group.hpp"

#include <algorithm>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

std::string describe(const StepDesc& d) {
  return str_cat(d.op, " #", d.seq, " (", d.bytes, " bytes, detail ", d.detail, ")");
}

}  // namespace

HostGroup::HostGroup(std::vector<int> member_process, int here, std::string name, std::chrono::milliseconds timeout,
                     std::shared_ptr<ProcessLinks> links, int comm, std::shared_ptr<void> owner)
    : size_(int(member_process.size())),
      process_(std::move(member_process)),
      here_(here),
      name_(std::move(name)),
      timeout_(timeout),
      links_(std::move(links)),
      comm_(comm),
      owner_(std::move(owner)),
      arrived_(process_.size(), 0),
      slots_(process_.size()) {
  TROUPE_CHECK(size_ >= 1, "collective group '", name_, "': no members");
  bool elsewhere = false;
  for (int p : process_) {
    local_count_ += p == here_;
    elsewhere |= p != here_;
  }
  TROUPE_CHECK(local_count_ > 0, "collective group '", name_, "': no member in process ", here_);
  TROUPE_CHECK(!elsewhere || links_, "collective group '", name_, "': members in other processes but no links");
  if (elsewhere)
    for (int i = 0; i < size_; ++i) {
      if (!this->here(i)) {
        remote_.push_back(nullptr);
        continue;
      }
      auto r = std::make_unique<Remote>();
      r->recvs = links_->requests();
      r->sends = links_->requests();
      remote_.push_back(std::move(r));
    }
}

HostGroup::~HostGroup() = default;

std::string HostGroup::step_name(const StepDesc& d) const {
  return str_cat("group '", name_, "' (", size_, " members): ", d.op, " #", d.seq);
}

void HostGroup::throw_failure_locked() { throw Error(failure_); }

void HostGroup::fail_group(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.empty()) failure_ = why;
  broken_ = true;
  cv_.notify_all();
  throw_failure_locked();
}

void HostGroup::barrier(int member, const StepDesc& desc, const char* what) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!failure_.empty()) throw_failure_locked();
  arrived_[size_t(member)] = 1;
  if (++arrived_count_ == local_count_) {
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
      if (here(i) && !arrived_[size_t(i)]) missing += str_cat(missing.empty() ? "" : ", ", i);
    // Breaks the group: the members already waiting hear the same error at once.
    failure_ =
        str_cat(step_name(desc), ": member ", member, " timed out after ",
                std::chrono::duration<double>(timeout_).count(), " s ", what, "; members never arrived: ", missing);
    broken_ = true;
    cv_.notify_all();
  }
  if (generation_ == generation) throw_failure_locked();
}

void HostGroup::post_remote(int member, const void* mine, int64_t mine_bytes, const PieceFn& piece) {
  Remote& r = *remote_[size_t(member)];
  r.inbox.resize(size_t(size_));
  for (int k = 0; k < size_; ++k) {
    if (here(k)) continue;
    const Piece in = piece(k, member);
    if (in.bytes > 0) {
      r.inbox[size_t(k)].resize(size_t(in.bytes));
      r.recvs->recv(comm_, r.inbox[size_t(k)].data(), in.bytes, process_[size_t(k)], k * size_ + member, k);
    }
    const Piece out = piece(member, k);
    if (out.bytes > 0) {
      TROUPE_CHECK(out.offset >= 0 && out.offset + out.bytes <= mine_bytes, "group '", name_, "': piece [", out.offset,
                   ", ", out.offset + out.bytes, ") outside the ", mine_bytes, "-byte buffer of member ", member);
      r.sends->send(comm_, static_cast<const std::byte*>(mine) + out.offset, out.bytes, process_[size_t(k)],
                    member * size_ + k, k);
    }
  }
}

void HostGroup::wait_remote(int member, const StepDesc& desc, LinkRequests& rq, const char* what) {
  std::vector<int> late;
  bool done = false;
  try {
    done = rq.wait_until(
        std::chrono::steady_clock::now() + timeout_, [this] { return broken_.load(); }, late);
  } catch (const Error& e) {
    fail_group(str_cat(step_name(desc), ": member ", member, ": ", e.what()));
  }
  if (done) return;
  if (broken_) {
    std::lock_guard<std::mutex> lock(mu_);
    throw_failure_locked();
  }
  std::string names;
  for (int k : late) names += str_cat(names.empty() ? "" : ", ", k, " (process ", process_[size_t(k)], ")");
  fail_group(str_cat(step_name(desc), ": member ", member, " timed out after ",
                     std::chrono::duration<double>(timeout_).count(), " s ", what, " members ", names));
}

std::vector<const std::byte*> HostGroup::begin_step(int member, const StepDesc& desc, const void* mine,
                                                    int64_t mine_bytes, const PieceFn& piece) {
  TROUPE_CHECK(member >= 0 && member < size_ && here(member), "group '", name_, "': member ", member,
               " is not in process ", here_);
  if (broken_) {
    std::lock_guard<std::mutex> lock(mu_);
    throw_failure_locked();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[size_t(member)] = {desc, static_cast<const std::byte*>(mine), mine_bytes};
  }
  // Transfers go first: a member elsewhere may be waiting for our pieces already.
  if (!remote_.empty()) {
    try {
      post_remote(member, mine, mine_bytes, piece);
    } catch (const Error& e) {
      fail_group(str_cat(step_name(desc), ": member ", member, ": ", e.what()));
    }
  }
  barrier(member, desc, "waiting for the others to arrive");
  // Every member here compares every local member's step with the first one's, so all of them
  // see a mismatch and fail together (nobody is left waiting at the next barrier). Slots are
  // only rewritten after the end_step barrier, which needs this member, so reading them
  // unlocked is safe. (Members elsewhere disagreeing show up as a length mismatch or a timeout.)
  int first = 0;
  while (!here(first)) ++first;
  for (int k = first + 1; k < size_; ++k) {
    if (!here(k) || slots_[size_t(k)].desc == slots_[size_t(first)].desc) continue;
    fail_group(str_cat("group '", name_, "': members called different collectives: member ", first, " ",
                       describe(slots_[size_t(first)].desc), ", member ", k, " ", describe(slots_[size_t(k)].desc)));
  }
  if (!remote_.empty()) wait_remote(member, desc, *remote_[size_t(member)]->recvs, "waiting for data from");
  std::vector<const std::byte*> src(size_t(size_), nullptr);
  for (int k = 0; k < size_; ++k) {
    const Piece p = piece(k, member);
    if (p.bytes == 0) continue;
    if (!here(k)) {
      src[size_t(k)] = remote_[size_t(member)]->inbox[size_t(k)].data();
      continue;
    }
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
  // Our buffer is the caller's again once the members elsewhere have their copies.
  if (!remote_.empty()) wait_remote(member, desc, *remote_[size_t(member)]->sends, "waiting to hand its data to");
  barrier(member, desc, "waiting for the others to finish reading");
}

void HostGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.empty()) failure_ = str_cat("group '", name_, "' aborted: ", why);
  broken_ = true;
  cv_.notify_all();
}

}  // namespace troupe::actors
