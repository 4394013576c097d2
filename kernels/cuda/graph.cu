#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda_graph.hpp"

namespace troupe::cuda {

void graph_capture(const Context& ctx, const std::function<void()>& work, void** graph, void** exec) {
  cudaStream_t stream = stream_of(ctx);
  // Thread-local mode: other threads (other devices' actors) may keep using CUDA meanwhile.
  TROUPE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t g = nullptr;
  try {
    work();
  } catch (...) {
    (void)cudaStreamEndCapture(stream, &g);  // leave the stream usable
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();
    throw;
  }
  TROUPE_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  cudaGraphExec_t e = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&e, g, 0);
  if (err != cudaSuccess) cudaGraphDestroy(g);
  TROUPE_CUDA_CHECK(err);
  *graph = g;
  *exec = e;
}

void graph_launch(const Context& ctx, void* exec) {
  TROUPE_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream_of(ctx)));
}

void graph_destroy(void* graph, void* exec) noexcept {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  if (graph) cudaGraphDestroy(static_cast<cudaGraph_t>(graph));
}

}  // namespace troupe::cuda
