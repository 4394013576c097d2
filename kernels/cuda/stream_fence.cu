// Fences as CUDA events without timing (kernels/stream_fence.hpp). The event is destroyed with
// its last owner; a stream already waiting on it keeps waiting correctly (CUDA releases an
// event's resources once its recorded work completes).
#include "kernels/cuda/cuda_state.cuh"
#include "kernels/stream_fence.hpp"

namespace troupe::cuda {

namespace {
cudaEvent_t event_of(const std::shared_ptr<void>& fence) { return static_cast<cudaEvent_t>(fence.get()); }
}  // namespace

std::shared_ptr<void> fence_record(const Context& ctx) {
  cudaEvent_t e = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::shared_ptr<void> fence(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  TROUPE_CUDA_CHECK(cudaEventRecord(e, stream_of(ctx)));
  return fence;
}

void fence_wait(const Context& ctx, const std::shared_ptr<void>& fence) {
  TROUPE_CUDA_CHECK(cudaStreamWaitEvent(stream_of(ctx), event_of(fence), 0));
}

void fence_host_wait(const std::shared_ptr<void>& fence) { TROUPE_CUDA_CHECK(cudaEventSynchronize(event_of(fence))); }

}  // namespace troupe::cuda
