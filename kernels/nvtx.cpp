#include "kernels/nvtx.hpp"

#include <cstdlib>

#if TROUPE_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace troupe {

// A profiler that collects NVTX ranges (Nsight Systems, Nsight Compute) loads itself through
// this variable; without it NVTX calls are no-ops, so there is nothing to format either.
bool nvtx_enabled() {
#if TROUPE_HAVE_CUDA
  static const bool enabled = std::getenv("NVTX_INJECTION64_PATH") != nullptr;
  return enabled;
#else
  return false;
#endif
}

void nvtx_push(const std::string& name) {
#if TROUPE_HAVE_CUDA
  nvtxRangePushA(name.c_str());
#else
  (void)name;
#endif
}

void nvtx_pop() {
#if TROUPE_HAVE_CUDA
  nvtxRangePop();
#endif
}

}  // namespace troupe
