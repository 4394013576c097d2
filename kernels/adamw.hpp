// AdamW (decoupled weight decay, bias-corrected, as torch.optim.AdamW and Megatron's Adam)
// over a flat parameter buffer split into segments, in ONE pass/launch (multi-tensor):
//   g  = grad * grad_scale
//   p  = p * (1 - lr * wd_segment)                      (wd_segment = decay ? weight_decay : 0)
//   m  = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)
// `master` holds the f32 master weights; `params` (optional) is the model's copy in its
// compute dtype, rewritten from master in the same pass.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

// A run of the flat buffer belonging to one parameter. Biases and norm weights get decay = false.
struct ParamSegment {
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = true;
};

// master, m, v, grad: f32 [P]; params: [P] in the model dtype, or undefined. step >= 1.
// Elements outside every segment are left untouched.
void adamw_step(const Context& ctx, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                const Tensor& params, const std::vector<ParamSegment>& segments, const AdamWConfig& cfg, int64_t step,
                float grad_scale);

namespace cpu {
void adamw_step(const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad, const Tensor& params,
                const std::vector<ParamSegment>& segments, const AdamWConfig& cfg, int64_t step, float grad_scale);
}
namespace cuda {
void adamw_step(const Context& ctx, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                const Tensor& params, const std::vector<ParamSegment>& segments, const AdamWConfig& cfg, int64_t step,
                float grad_scale);
}

}  // namespace troupe
