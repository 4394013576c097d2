#include "kernels/stream_fence.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

std::shared_ptr<void> fence_record(const Context& ctx) {
  if (!ctx.is_cuda()) return nullptr;
  TROUPE_ON_CUDA(return cuda::fence_record(ctx));
}

void fence_wait(const Context& ctx, const std::shared_ptr<void>& fence) {
  if (!fence) return;
  TROUPE_ON_CUDA(cuda::fence_wait(ctx, fence));
}

void fence_host_wait(const std::shared_ptr<void>& fence) {
  if (!fence) return;
  TROUPE_ON_CUDA(cuda::fence_host_wait(fence));
}

}  // namespace troupe
