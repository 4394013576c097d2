#include "model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/check.hpp"
#include "kernels/elementwise.hpp"

namespace troupe {

Optimizer::Optimizer(GptChunk& chunk, const OptimizerConfig& config, OptimizerShard shard)
    : chunk_(chunk), config_(config), shard_(shard) {
  const Context& ctx = chunk.context();
  const int64_t total = chunk.params().numel();
  if (shard_.end < 0) shard_.end = total;
  TROUPE_CHECK(0 <= shard_.begin && shard_.begin <= shard_.end && shard_.end <= total, "optimizer shard [",
               shard_.begin, ", ", shard_.end, ") of a ", total, "-element buffer");
  const int64_t n = shard_.end - shard_.begin;
  // The parameters' AdamW segments, cut to the shard.
  for (const ParamSegment& s : chunk.layout().segments()) {
    const int64_t lo = std::max(s.offset, shard_.begin), hi = std::min(s.offset + s.numel, shard_.end);
    if (lo < hi) segments_.push_back({lo - shard_.begin, hi - lo, s.decay});
  }
  const Tensor params = chunk.params().slice(shard_.begin, {n});
  if (chunk.compute_dtype() == DType::f32) {
    master_ = params;
  } else {
    master_ = Tensor::empty(ctx, DType::f32, {n});
    convert(ctx, params, master_);
  }
  m_ = Tensor::zeros(ctx, DType::f32, {n});
  v_ = Tensor::zeros(ctx, DType::f32, {n});
}

GradStats Optimizer::grad_stats(const std::string& exclude) const {
  const Context& ctx = chunk_.context();
  const Tensor& g = chunk_.grads();
  const TensorShard& tp = chunk_.layout().tensor_shard();
  // A parameter every tensor-parallel rank holds whole is counted on rank 0 only.
  std::vector<Tensor> parts;
  int64_t start = 0, end = 0;  // the run of counted elements being collected
  const auto& params = chunk_.layout().params();
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    const int64_t next = i + 1 < params.size() ? params[i + 1].offset : g.numel();
    const bool counted = p.name != exclude && !(p.replicated() && tp.rank != 0);
    const int64_t lo = std::max(p.offset, shard_.begin), hi = std::min(next, shard_.end);
    if (!counted || lo >= hi) continue;
    if (lo != end) {
      if (end > start) parts.push_back(g.slice(start, {end - start}));
      start = lo;
    }
    end = hi;
  }
  if (end > start) parts.push_back(g.slice(start, {end - start}));
  if (parts.empty()) return GradStats{};
  return troupe::grad_stats(ctx, parts);
}

void Optimizer::apply(float lr, float clip, float loss_scale) {
  const Context& ctx = chunk_.context();
  AdamWConfig adam = config_.adam;
  adam.lr = lr;
  ++step_;
  const double inv_scale = 1.0 / double(loss_scale);
  const int64_t n = shard_.end - shard_.begin;
  const Tensor model_copy =
      chunk_.compute_dtype() == DType::f32 ? Tensor() : chunk_.params().slice(shard_.begin, {n});
  adamw_step(ctx, master_, m_, v_, chunk_.grads().slice(shard_.begin, {n}), model_copy, segments_, adam, step_,
             float(clip * inv_scale));
  chunk_.zero_grads();
}

void Optimizer::restore(const Tensor& master, const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t step) {
  const Context& ctx = chunk_.context();
  const int64_t p = chunk_.layout().size();
  for (const Tensor* t : {&master, &exp_avg, &exp_avg_sq}) {
    TROUPE_CHECK(t->dtype() == DType::f32 && t->numel() == p, "Optimizer::restore: expected f32 [", p, "], got ",
                 dtype_name(t->dtype()), " of ", t->numel(), " elements");
  }
  chunk_.load_weights(master);  // on a CPU chunk master_ is (a view of) the params buffer itself
  // The shard's part of the chunk's elements (the buffer's padding beyond them stays zero).
  const int64_t begin = std::min(shard_.begin, p), n = std::min(shard_.end, p) - begin;
  if (n > 0) {
    if (chunk_.compute_dtype() != DType::f32) copy(ctx, to_device(ctx, master.slice(begin, {n}), DType::f32), master_.slice(0, {n}));
    copy(ctx, to_device(ctx, exp_avg.slice(begin, {n}), DType::f32), m_.slice(0, {n}));
    copy(ctx, to_device(ctx, exp_avg_sq.slice(begin, {n}), DType::f32), v_.slice(0, {n}));
  }
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
