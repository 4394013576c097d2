// Stream-ordered device memory (stream_alloc.hpp).
#include <algorithm>

#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/stream_alloc.hpp"

namespace troupe::cuda {

void* stream_alloc(const Context& ctx, size_t bytes) {
  void* ptr = nullptr;
  TROUPE_CUDA_CHECK(cudaMallocAsync(&ptr, std::max<size_t>(bytes, 256), stream_of(ctx)));
  return ptr;
}

void stream_free(void* stream, void* ptr) noexcept {
  if (ptr) cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream));  // no throw from a destructor
}

void stream_free(const Context& ctx, void* ptr) noexcept { stream_free(stream_handle(ctx), ptr); }

void* stream_handle(const Context& ctx) { return stream_of(ctx); }

}  // namespace troupe::cuda
