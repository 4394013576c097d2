// The GELU (tanh approximation) and its derivative on the device, for every kernel that applies
// them (activations, the decode GEMV's epilogue, the GELU backward that sums a bias gradient).
#pragma once

namespace troupe::cuda {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;

__device__ __forceinline__ float gelu_of(float v) {
  return 0.5f * v * (1.0f + tanhf(kGeluSqrt2OverPi * (v + kGeluCoef * v * v * v)));
}

// d gelu(v) / dv.
__device__ __forceinline__ float gelu_grad_of(float v) {
  const float th = tanhf(kGeluSqrt2OverPi * (v + kGeluCoef * v * v * v));
  const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * v * v);
  return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
}

}  // namespace troupe::cuda
