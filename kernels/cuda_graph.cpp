#include "kernels/cuda_graph.hpp"

#include <utility>

#include "kernels/dispatch.hpp"

namespace troupe {

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : graph_(std::exchange(other.graph_, nullptr)), exec_(std::exchange(other.exec_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    std::swap(graph_, other.graph_);
    std::swap(exec_, other.exec_);
  }
  return *this;
}

CudaGraph::~CudaGraph() {
#if TROUPE_HAVE_CUDA
  if (exec_ || graph_) cuda::graph_destroy(graph_, exec_);
#endif
}

CudaGraph CudaGraph::capture(const Context& ctx, const std::function<void()>& work) {
  TROUPE_CHECK(ctx.is_cuda(), "CudaGraph::capture: needs a CUDA context");
  CudaGraph g;
  TROUPE_ON_CUDA(cuda::graph_capture(ctx, work, &g.graph_, &g.exec_));
  return g;
}

void CudaGraph::launch(const Context& ctx) const {
  TROUPE_CHECK(valid(), "CudaGraph::launch: nothing was captured");
  TROUPE_ON_CUDA(cuda::graph_launch(ctx, exec_));
}

}  // namespace troupe
