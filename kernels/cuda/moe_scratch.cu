// Stream-ordered allocations of the MoE ops' temporaries (moe_scratch.hpp).
#include <algorithm>

#include "kernels/cuda/cuda_state.cuh"
#include "kernels/cuda/moe_scratch.hpp"

namespace troupe::cuda {

void* moe_stream_alloc(const Context& ctx, size_t bytes) {
  void* ptr = nullptr;
  TROUPE_CUDA_CHECK(cudaMallocAsync(&ptr, std::max<size_t>(bytes, 256), stream_of(ctx)));
  return ptr;
}

void moe_stream_free(const Context& ctx, void* ptr) noexcept {
  if (ptr) cudaFreeAsync(ptr, stream_of(ctx));  // no throw from a destructor
}

}  // namespace troupe::cuda
