// A CUDA graph: the work a function enqueues on a context's stream, captured once and then
// replayed with a single launch (no per-kernel launch overhead). The captured kernels keep
// their arguments: replays read and write the same buffers, so the caller refreshes their
// contents (e.g. a batch's index tensors) before each launch.
//
//   CudaGraph g = CudaGraph::capture(ctx, [&] { model_step(ctx); });   // nothing runs yet
//   g.launch(ctx);                                                       // runs model_step's kernels
//
// Only on a CUDA context; capture fails (troupe::Error) when the work synchronizes or copies
// from pageable host memory.
#pragma once

#include <functional>

#include "kernels/context.hpp"

namespace troupe {

class CudaGraph {
 public:
  CudaGraph() = default;
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph();

  static CudaGraph capture(const Context& ctx, const std::function<void()>& work);
  // Enqueues the graph on ctx's stream.
  void launch(const Context& ctx) const;
  bool valid() const { return exec_ != nullptr; }

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

namespace cuda {
// Defined in kernels/cuda/graph.cu.
void graph_capture(const Context& ctx, const std::function<void()>& work, void** graph, void** exec);
void graph_launch(const Context& ctx, void* exec);
void graph_destroy(void* graph, void* exec) noexcept;
}  // namespace cuda

}  // namespace troupe
