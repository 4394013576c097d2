// kernels/cuda/dependent_launch.cuh.
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"

namespace troupe::cuda {

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TROUPE_DECODE_PDL");
    if (value == nullptr || std::strcmp(value, "1") == 0) return true;
    if (std::strcmp(value, "0") == 0) return false;
    TROUPE_FAIL("environment variable TROUPE_DECODE_PDL is '", value,
                "': set it to 1 (decode kernels start during the kernel before them, the default) or 0 (they do "
                "not)");
  }();
  return enabled;
}

bool waits_for_prior_grids(const void* kernel) {
  cudaFuncAttributes attributes{};
  TROUPE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.ptxVersion >= 90;
}

void allow_early_start(cudaLaunchConfig_t& config, cudaLaunchAttribute& attr, bool kernel_waits) {
  if (!dependent_launch_enabled() || !kernel_waits) return;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
}

}  // namespace troupe::cuda
