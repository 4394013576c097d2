#include <cmath>

#include "kernels/adamw.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

void adamw_step(const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad, const Tensor& params,
                const std::vector<ParamSegment>& segments, const AdamWConfig& cfg, int64_t step, float grad_scale) {
  // Step-wide scalars in f64, then f32, as torch.optim.AdamW computes them.
  const double bias_correction1 = 1.0 - std::pow(double(cfg.beta1), double(step));
  const float step_size = float(double(cfg.lr) / bias_correction1);
  const float bias_correction2_sqrt = float(std::sqrt(1.0 - std::pow(double(cfg.beta2), double(step))));
  const float one_minus_beta1 = float(1.0 - double(cfg.beta1));
  const float one_minus_beta2 = float(1.0 - double(cfg.beta2));
  const float decay_factor = float(1.0 - double(cfg.lr) * double(cfg.weight_decay));

  float* w = master.data_as<float>();
  float* mv = m.data_as<float>();
  float* vv = v.data_as<float>();
  const float* gv = grad.data_as<float>();
  float* copy = params.defined() ? params.data_as<float>() : nullptr;
  for (const ParamSegment& seg : segments) {
    const float seg_decay = seg.decay ? decay_factor : 1.0f;
#pragma omp parallel for if (worth_parallel(seg.numel)) schedule(static)
    for (int64_t i = seg.offset; i < seg.offset + seg.numel; ++i) {
      const float g = gv[i] * grad_scale;
      const float p = w[i] * seg_decay;
      mv[i] = cfg.beta1 * mv[i] + one_minus_beta1 * g;
      vv[i] = cfg.beta2 * vv[i] + one_minus_beta2 * (g * g);
      const float denom = std::sqrt(vv[i]) / bias_correction2_sqrt + cfg.eps;
      w[i] = p - step_size * (mv[i] / denom);
      if (copy) copy[i] = w[i];
    }
  }
}

}  // namespace troupe::cpu
