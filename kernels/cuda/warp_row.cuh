// One attention head row of up to kSimpleAttentionMaxHeadDim values held in f32 registers across
// the 32 lanes of a warp (lane i holds dims i, i + 32, ...): the building block of the
// one-warp-per-row attention kernels (attention_simple.cu, attention_block.cu).
#pragma once

#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/common.cuh"

namespace troupe::cuda {

struct WarpRow {
  static constexpr int kDimsPerLane = kSimpleAttentionMaxHeadDim / 32;
  float v[kDimsPerLane];

  __device__ void fill(float x) {
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) v[k] = x;
  }
  template <typename T>
  __device__ void load(const T* p, int D, int lane) {
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) v[k] = lane + 32 * k < D ? to_f32(p[lane + 32 * k]) : 0.0f;
  }
  template <typename T>
  __device__ void store(T* p, float scale, int D, int lane) const {
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k)
      if (lane + 32 * k < D) p[lane + 32 * k] = from_f32<T>(v[k] * scale);
  }
  // p += this * scale (an accumulating backward).
  template <typename T>
  __device__ void add_to(T* p, float scale, int D, int lane) const {
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k)
      if (lane + 32 * k < D) p[lane + 32 * k] = from_f32<T>(to_f32(p[lane + 32 * k]) + v[k] * scale);
  }
  // Full dot product with a row in memory; every lane gets it.
  template <typename T>
  __device__ float dot(const T* p, int D, int lane) const {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k)
      if (lane + 32 * k < D) s += v[k] * to_f32(p[lane + 32 * k]);
    return warp_sum(s);
  }
  // this = this * c + a * p
  template <typename T>
  __device__ void scale_add(float c, float a, const T* p, int D, int lane) {
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k)
      if (lane + 32 * k < D) v[k] = v[k] * c + a * to_f32(p[lane + 32 * k]);
  }
};

}  // namespace troupe::cuda
