#include "kernels/context.hpp"

#include <unistd.h>

#include "base/check.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace troupe {

#if TROUPE_HAVE_CUDA
// Defined in cuda/runtime.cu.
std::unique_ptr<CudaState, CudaStateDeleter> make_cuda_state(int device);
void cuda_synchronize(const CudaState& st);
void cuda_activate(const CudaState& st);
#endif

Context::Context(DeviceKind kind, int device) : kind_(kind), device_(device) {}
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;
Context::~Context() = default;

Context Context::cpu() { return Context(DeviceKind::cpu, 0); }

Context Context::cuda(int device) {
#if TROUPE_HAVE_CUDA
  Context c(DeviceKind::cuda, device);
  c.cuda_ = make_cuda_state(device);
  return c;
#else
  TROUPE_FAIL("this build has no CUDA backend (nvcc was not found at configure time); cannot use cuda:", device);
#endif
}

CudaState& Context::cuda_state() const {
  TROUPE_CHECK(cuda_ != nullptr, "a CUDA op was called with a CPU context");
  return *cuda_;
}

void Context::synchronize() const {
#if TROUPE_HAVE_CUDA
  if (cuda_) cuda_synchronize(*cuda_);
#endif
}

void Context::activate() const {
#if TROUPE_HAVE_CUDA
  if (cuda_) cuda_activate(*cuda_);
#endif
}

#if !TROUPE_HAVE_CUDA
void CudaStateDeleter::operator()(CudaState*) const noexcept {}
#endif

size_t device_memory_in_use(const Context& ctx) {
#if TROUPE_HAVE_CUDA
  if (ctx.is_cuda()) return cuda::memory_in_use(ctx.device_index());
#endif
  return 0;
}

size_t device_memory_total(bool cuda, int device) {
#if TROUPE_HAVE_CUDA
  if (cuda) return cuda::memory_total(device);
#else
  TROUPE_CHECK(!cuda, "device_memory_total: this build has no CUDA backend");
  (void)device;
#endif
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  TROUPE_CHECK(pages > 0 && page > 0, "sysconf(_SC_PHYS_PAGES) failed: the machine's memory is unknown");
  return size_t(pages) * size_t(page);
}

bool cuda_built() { return TROUPE_HAVE_CUDA; }

bool cuda_available() {
#if TROUPE_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

}  // namespace troupe
