// The scale rule of FP8 scaling, one definition for the CPU backend and the CUDA kernel: where
// amax is finite and positive, scale = fp8_max / amax * 2^-margin, held below infinity (a tiny
// amax); elsewhere the previous scale stays (Transformer Engine's delayed-scaling rule).
#pragma once

#include <cfloat>
#include <cmath>

#include "kernels/host_device.hpp"

namespace troupe {

TROUPE_HOST_DEVICE float fp8_scale_from_amax(float amax, float previous, float fp8_max, int margin) {
  if (!(amax > 0.0f) || !(amax <= FLT_MAX)) return previous;  // zero, negative, NaN or infinite
  const float scale = ldexpf(fp8_max / amax, -margin);
  return scale <= FLT_MAX ? scale : FLT_MAX;
}

}  // namespace troupe
