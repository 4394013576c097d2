// Dropout with a counter-based RNG (Philox-4x32-10): element i of a call keeps its value
// iff uniform(seed, offset + i) >= p, so CPU and CUDA draw the same mask for the same
// (seed, offset), and backward recomputes the mask instead of storing it.
//   y = keep ? x / (1 - p) : 0
// philox.hpp holds the generator, usable from host and device code.
#pragma once

#include <cstdint>

#include "kernels/tensor.hpp"

namespace troupe {

// x, y: same shape (y may alias x). p in [0, 1).
void dropout_forward(const Context& ctx, const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t offset);
// dx = keep ? dy / (1 - p) : 0 (dx may alias dy).
void dropout_backward(const Context& ctx, const Tensor& dy, const Tensor& dx, float p, uint64_t seed, uint64_t offset);

namespace cpu {
void dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t offset);
void dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed, uint64_t offset);
}  // namespace cpu
namespace cuda {
void dropout_forward(const Context& ctx, const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t offset);
void dropout_backward(const Context& ctx, const Tensor& dy, const Tensor& dx, float p, uint64_t seed, uint64_t offset);
}  // namespace cuda

}  // namespace troupe
