// The tied embedding's two copies when their stages live in different processes: each
// holder sums through its endpoint of a two-member collective group (MPI for CPU devices,
// NCCL for GPUs). In one process make_pair_reducer (device_services.hpp) does the job, also
// for two stages sharing one GPU, which a group cannot hold.
#pragma once

#include <memory>
#include <vector>

#include "actors/fabric/device_services.hpp"
#include "kernels/collectives.hpp"

namespace troupe::actors {

class GroupPairReducer final : public PairReducer {
 public:
  // members[i]: rank i's endpoint, null where rank i lives in another process.
  explicit GroupPairReducer(std::vector<std::unique_ptr<Collectives>> members);
  void reduce(int rank, const Context& ctx, const Tensor& grad, std::function<void()> done) override;
  void abort() override;

 private:
  std::vector<std::unique_ptr<Collectives>> members_;
};

}  // namespace troupe::actors
