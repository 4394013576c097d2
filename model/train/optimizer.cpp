#include "model/train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.hpp"
#include "kernels/elementwise.hpp"

namespace troupe {

int64_t OptimizerShard::numel() const {
  int64_t n = 0;
  for (const Range& r : ranges) n += r.end - r.begin;
  return n;
}

Optimizer::Optimizer(GptChunk& chunk, const OptimizerConfig& config, OptimizerShard shard)
    : chunk_(chunk), config_(config), shard_(std::move(shard)) {
  const Context& ctx = chunk.context();
  const int64_t total = chunk.params().numel();
  if (shard_.ranges.empty()) shard_.ranges.push_back({0, total});
  int64_t at = 0;
  for (const auto& r : shard_.ranges) {
    TROUPE_CHECK(at <= r.begin && r.begin <= r.end && r.end <= total, "optimizer shard range [", r.begin, ", ", r.end,
                 ") of a ", total, "-element buffer (ranges must be ordered and disjoint)");
    at = r.end;
    // The parameters' AdamW segments, cut to the range.
    std::vector<ParamSegment> segs;
    for (const ParamSegment& s : chunk.layout().segments()) {
      const int64_t lo = std::max(s.offset, r.begin), hi = std::min(s.offset + s.numel, r.end);
      if (lo < hi) segs.push_back({lo - r.begin, hi - lo, s.decay});
    }
    segments_.push_back(std::move(segs));
  }
  const int64_t n = shard_.numel();
  const bool whole = shard_.ranges.size() == 1 && n == total;
  if (chunk.compute_dtype() == DType::f32 && whole) {
    master_ = chunk.params();  // a CPU chunk's parameters are the master weights
  } else {
    master_ = Tensor::empty(ctx, DType::f32, {n});
    int64_t off = 0;
    for (const auto& r : shard_.ranges) {
      const Tensor src = chunk.params().slice(r.begin, {r.end - r.begin});
      const Tensor dst = master_.slice(off, {r.end - r.begin});
      if (chunk.compute_dtype() == DType::f32)
        copy(ctx, src, dst);
      else
        convert(ctx, src, dst);
      off += r.end - r.begin;
    }
  }
  m_ = Tensor::zeros(ctx, DType::f32, {n});
  v_ = Tensor::zeros(ctx, DType::f32, {n});
}

GradStats Optimizer::grad_stats(const std::string& exclude, NormPart part) const {
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
    const bool expert = ParamLayout::is_expert_param(p.name);
    const bool counted = p.name != exclude && !(p.replicated() && tp.rank != 0) &&
                         (part == NormPart::all || (part == NormPart::experts) == expert);
    if (!counted) continue;
    for (const auto& r : shard_.ranges) {
      const int64_t lo = std::max(p.offset, r.begin), hi = std::min(next, r.end);
      if (lo >= hi) continue;
      if (lo != end) {
        if (end > start) parts.push_back(g.slice(start, {end - start}));
        start = lo;
      }
      end = hi;
    }
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
  const bool copy_back = chunk_.compute_dtype() != DType::f32 || master_.data() != chunk_.params().data();
  int64_t off = 0;
  for (size_t i = 0; i < shard_.ranges.size(); ++i) {
    const auto& r = shard_.ranges[i];
    const int64_t n = r.end - r.begin;
    const Tensor params = chunk_.params().slice(r.begin, {n});
    adamw_step(ctx, master_.slice(off, {n}), m_.slice(off, {n}), v_.slice(off, {n}), chunk_.grads().slice(r.begin, {n}),
               copy_back ? params : Tensor(), segments_[i], adam, step_, float(clip * inv_scale));
    off += n;
  }
  chunk_.update_moe_expert_bias();
  chunk_.zero_grads();
}

void Optimizer::restore(const Tensor& master, const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t step) {
  const Context& ctx = chunk_.context();
  const int64_t p = chunk_.layout().size();
  for (const Tensor* t : {&master, &exp_avg, &exp_avg_sq}) {
    TROUPE_CHECK(t->dtype() == DType::f32 && t->numel() == p, "Optimizer::restore: expected f32 [", p, "], got ",
                 dtype_name(t->dtype()), " of ", t->numel(), " elements");
  }
  chunk_.load_weights(master);  // on a whole CPU chunk master_ is the params buffer itself
  // The shard's part of the chunk's elements (the buffer's padding beyond them stays zero).
  int64_t off = 0;
  for (const auto& r : shard_.ranges) {
    const int64_t begin = std::min(r.begin, p), n = std::min(r.end, p) - begin;
    if (n > 0) {
      if (master_.data() != chunk_.params().data())
        copy(ctx, to_device(ctx, master.slice(begin, {n}), DType::f32), master_.slice(off, {n}));
      copy(ctx, to_device(ctx, exp_avg.slice(begin, {n}), DType::f32), m_.slice(off, {n}));
      copy(ctx, to_device(ctx, exp_avg_sq.slice(begin, {n}), DType::f32), v_.slice(off, {n}));
    }
    off += r.end - r.begin;
  }
  ctx.synchronize();  // the host buffers may go away when we return
  step_ = step;
}

void Optimizer::skip() {
  chunk_.update_moe_expert_bias();  // Megatron updates it in finalize_model_grads, before the step
  chunk_.zero_grads();
}

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
