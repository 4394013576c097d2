#include "model/optimizer.hpp"

#include <cmath>
#include <limits>

#include "kernels/check.hpp"
#include "kernels/elementwise.hpp"

namespace troupe {

Optimizer::Optimizer(GptChunk& chunk, const OptimizerConfig& config)
    : chunk_(chunk), config_(config), segments_(chunk.layout().segments()) {
  const Context& ctx = chunk.context();
  const int64_t p = chunk.layout().size();
  if (chunk.compute_dtype() == DType::f32) {
    master_ = chunk.params();
  } else {
    master_ = Tensor::empty(ctx, DType::f32, {p});
    convert(ctx, chunk.params(), master_);
  }
  m_ = Tensor::zeros(ctx, DType::f32, {p});
  v_ = Tensor::zeros(ctx, DType::f32, {p});
}

GradStats Optimizer::grad_stats(const std::string& exclude) const {
  const Context& ctx = chunk_.context();
  if (exclude.empty()) return troupe::grad_stats(ctx, {chunk_.grads()});
  const ParamInfo& skip = chunk_.layout().find(exclude);
  const Tensor& g = chunk_.grads();
  std::vector<Tensor> parts;
  if (skip.offset > 0) parts.push_back(g.slice(0, {skip.offset}));
  const int64_t after = skip.offset + skip.numel();
  if (after < g.numel()) parts.push_back(g.slice(after, {g.numel() - after}));
  if (parts.empty()) return GradStats{};
  return troupe::grad_stats(ctx, parts);
}

void Optimizer::apply(float lr, float clip, float loss_scale) {
  const Context& ctx = chunk_.context();
  AdamWConfig adam = config_.adam;
  adam.lr = lr;
  ++step_;
  const double inv_scale = 1.0 / double(loss_scale);
  const Tensor model_copy = chunk_.compute_dtype() == DType::f32 ? Tensor() : chunk_.params();
  adamw_step(ctx, master_, m_, v_, chunk_.grads(), model_copy, segments_, adam, step_, float(clip * inv_scale));
  chunk_.zero_grads();
}

void Optimizer::restore(const Tensor& master, const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t step) {
  const Context& ctx = chunk_.context();
  const int64_t p = chunk_.layout().size();
  for (const Tensor* t : {&master, &exp_avg, &exp_avg_sq}) {
    TROUPE_CHECK(t->dtype() == DType::f32 && t->numel() == p, "Optimizer::restore: expected f32 [", p, "], got ",
                 dtype_name(t->dtype()), " of ", t->numel(), " elements");
  }
  chunk_.load_weights(master);  // on a CPU chunk master_ is the params buffer itself
  if (chunk_.compute_dtype() != DType::f32) copy(ctx, master, master_);
  copy(ctx, exp_avg, m_);
  copy(ctx, exp_avg_sq, v_);
  ctx.synchronize();  // the host buffers may go away when we return
  step_ = step;
}

void Optimizer::skip() { chunk_.zero_grads(); }

StepResult Optimizer::step(float lr, float loss_scale) {
  StepResult r;
  const GradStats stats = grad_stats();
  if (!stats.finite) {
    r.skipped = true;
    r.grad_norm = std::numeric_limits<double>::quiet_NaN();
    skip();
    return r;
  }
  const double inv_scale = 1.0 / double(loss_scale);
  r.grad_norm = stats.norm() * inv_scale;
  GradStats unscaled = stats;
  unscaled.sum_sq = stats.sum_sq * inv_scale * inv_scale;
  apply(lr, clip_coefficient(unscaled, config_.clip_grad), loss_scale);
  return r;
}

}  // namespace troupe
