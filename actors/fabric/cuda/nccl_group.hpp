// NCCL collective groups (defined in nccl_collectives.cpp, built only with the CUDA backend).
// Plain C++: callers never see a CUDA, NCCL or MPI type; the Fabric moves the unique id
// (cuda::nccl_unique_id) between processes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/fabric/collective_groups.hpp"

namespace troupe::actors::cuda {

// The endpoints of the members of an NCCL group that live in this process: contexts[i] is
// member i's CUDA context when it is here, else null (the group's size is contexts.size()).
// Every process with members calls this with the same id; the local ranks are created
// together (ncclGroupStart/End), so it returns once the whole communicator exists.
std::vector<std::unique_ptr<Collectives>> make_nccl_group(const std::vector<uint8_t>& id,
                                                          const std::vector<const Context*>& contexts,
                                                          const GroupOptions& options);

}  // namespace troupe::actors::cuda
