// CPU endpoints of a collective group (internal to actors/): each collective is one or two
// HostGroup exchange steps plus the arithmetic, in member order. make_cpu_group and the
// Fabric's CPU groups both hand these out.
#pragma once

#include <memory>

#include "actors/fabric/host_group.hpp"
#include "kernels/collectives.hpp"

namespace troupe::actors {

// Member `rank` of `group`, used from one thread.
std::unique_ptr<Collectives> make_cpu_endpoint(std::shared_ptr<HostGroup> group, int rank);

}  // namespace troupe::actors
