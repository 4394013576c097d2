// kernels/context_lanes.hpp: a lane switch trades the members of two CudaStates that belong to a
// stream; the device, its properties and the cuBLASLt handle (no stream of its own) stay.
#include <utility>

#include "kernels/context_lanes.hpp"
#include "kernels/cuda/cuda_state.cuh"

namespace troupe::cuda {

void trade_streams(const Context& a, const Context& b) {
  CudaState &x = a.cuda_state(), &y = b.cuda_state();
  TROUPE_CHECK(x.device == y.device, "ContextLanes: lanes on devices ", x.device, " and ", y.device);
  std::swap(x.stream, y.stream);
  std::swap(x.blas, y.blas);  // bound to its stream and workspace when made
  std::swap(x.workspace, y.workspace);
  std::swap(x.workspace_bytes, y.workspace_bytes);
  std::swap(x.cudnn, y.cudnn);  // bound to its stream when made
  std::swap(x.fork, y.fork);
  std::swap(x.lanes, y.lanes);
}

}  // namespace troupe::cuda
