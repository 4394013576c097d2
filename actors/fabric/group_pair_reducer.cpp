#include "actors/fabric/group_pair_reducer.hpp"

#include "base/check.hpp"

namespace troupe::actors {

GroupPairReducer::GroupPairReducer(std::vector<std::unique_ptr<Collectives>> members) : members_(std::move(members)) {
  TROUPE_CHECK(members_.size() == 2, "GroupPairReducer: a pair, not ", members_.size(), " members");
}

void GroupPairReducer::reduce(int rank, const Context& ctx, const Tensor& grad, std::function<void()> done) {
  TROUPE_CHECK((rank == 0 || rank == 1) && members_[size_t(rank)], "GroupPairReducer: rank ", rank,
               " does not live in this process");
  members_[size_t(rank)]->all_reduce(ctx, grad);  // CPU: returns summed; GPU: enqueued
  done();
}

void GroupPairReducer::abort() {
  for (auto& m : members_)
    if (m) m->abort();
}

}  // namespace troupe::actors
