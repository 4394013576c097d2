// Global gradient statistics for clipping and fp16 loss scaling: the sum of squares of
// every element (accumulated in f64 on the host side of the reduction) and whether every
// element is finite. Synchronizes: the caller needs the numbers on the host.
//   GradStats s = grad_stats(ctx, {grads});
//   float clip = clip_coefficient(s, 1.0f);   // min(1, max_norm / (norm + 1e-6))
#pragma once

#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

struct GradStats {
  double sum_sq = 0.0;  // sum of squares (meaningless when !finite)
  bool finite = true;   // no inf/nan anywhere
  double norm() const;
};

// Each tensor f32, any shape.
GradStats grad_stats(const Context& ctx, const std::vector<Tensor>& grads);
// Megatron/torch clipping: max_norm / (norm + 1e-6) when that is < 1, else 1. max_norm <= 0: no clipping.
float clip_coefficient(const GradStats& s, float max_norm);

namespace cpu {
GradStats grad_stats(const std::vector<Tensor>& grads);
}
namespace cuda {
GradStats grad_stats(const Context& ctx, const std::vector<Tensor>& grads);
}

}  // namespace troupe
