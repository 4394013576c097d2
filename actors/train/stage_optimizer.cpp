#include "actors/train/stage_optimizer.hpp"

#include "actors/fabric/device_services.hpp"
#include "base/check.hpp"
#include "kernels/nvtx.hpp"

namespace troupe::actors {

bool expert_parallel(StageWorker& w) { return w.model(0).layout().expert_shard().size > 1; }

Collectives* bucket_group(const StageWorker& w, const GradBucket& b, Collectives* dp) {
  return b.expert ? w.expert_data_group() : dp;
}

OptimizerShard::Range bucket_shard(const GradBucket& b, const Collectives* group) {
  if (group == nullptr) return {b.begin, b.end};
  const int64_t begin = b.shard_begin(group->rank(), group->size());
  return {begin, begin + b.shard_size(group->size())};
}

void reduce_bucket(const Context& ctx, StageWorker& w, const GradBucket& b, Collectives* dp) {
  Collectives* group = bucket_group(w, b, dp);
  if (group == nullptr) return;  // one rank holds these experts: nothing to sum
  const Tensor g = w.model(b.chunk).grads().slice(b.begin, {b.end - b.begin});
  if (!w.distributed_optimizer()) {
    group->all_reduce(ctx, g);
    return;
  }
  const OptimizerShard::Range s = bucket_shard(b, group);
  group->reduce_scatter(ctx, g, g.slice(s.begin - b.begin, {s.end - s.begin}));
}

std::vector<std::pair<std::string, const Tensor*>> checkpoint_parts(const Optimizer& opt, bool with_moments) {
  std::vector<std::pair<std::string, const Tensor*>> parts = {{"", &opt.master()}};
  if (with_moments) {
    parts.emplace_back(kExpAvgPrefix, &opt.exp_avg());
    parts.emplace_back(kExpAvgSqPrefix, &opt.exp_avg_sq());
  }
  return parts;
}

StageOptimizer::StageOptimizer(std::shared_ptr<StageWorker> worker, std::vector<std::unique_ptr<Optimizer>> optimizers,
                               std::vector<std::string> norm_exclude)
    : worker_(std::move(worker)), optimizers_(std::move(optimizers)), norm_exclude_(std::move(norm_exclude)) {
  TROUPE_CHECK(worker_ && int(optimizers_.size()) == worker_->chunks(),
               "StageOptimizer: ", worker_ ? worker_->name() : "no stage", " needs one optimizer per chunk, got ",
               optimizers_.size());
  norm_exclude_.resize(optimizers_.size());
}

void StageOptimizer::finalize_grads() {
  StageWorker& w = *worker_;
  const NvtxRange range("reduce grads stage ", w.stage());
  for (int c = 0; c < w.chunks(); ++c) w.model(c).reduce_tensor_parallel_grads();
  Collectives* dp = w.dp_group();
  // Delayed FP8 scaling: the step's amaxes reduced over the tensor and data x context groups, so
  // every replica and shard takes the next step's scales from the same amaxes.
  for (int c = 0; c < w.chunks(); ++c) w.model(c).fp8_update_scales({dp});
  // MoE expert bias: every replica updates it from the token counts of all of them (Megatron
  // all-reduces local_tokens_per_expert over tp-cp-dp in finalize_model_grads), so all apply the same.
  if (dp != nullptr)
    for (int c = 0; c < w.chunks(); ++c)
      for (const Tensor& counts : w.model(c).moe_token_counts()) dp->all_reduce(context(), counts);
  if (dp == nullptr || w.overlap_grad_reduce()) return;  // no replicas / the reducer actor did it
  for (const GradBucket& b : w.buckets()) reduce_bucket(context(), w, b, dp);
}

GradStats StageOptimizer::grad_stats() const {
  GradStats total;
  // With the distributed optimizer every rank counts its shards, which split the dense buckets
  // over the data ranks and each expert's over the ranks holding it: every parameter once.
  const bool ep = expert_parallel(*worker_) && !worker_->distributed_optimizer();
  using Part = Optimizer::NormPart;
  for (size_t c = 0; c < optimizers_.size(); ++c) {
    const GradStats s = optimizers_[c]->grad_stats(norm_exclude_[c], ep ? Part::dense : Part::all);
    total.sum_sq += s.sum_sq;
    total.finite = total.finite && s.finite;
  }
  if (!ep) return total;
  // Each expert once: this rank's experts' squares summed over the expert group (the data ranks
  // holding the other experts), as the optimizer counts the first data rank's report.
  GradStats experts;
  for (size_t c = 0; c < optimizers_.size(); ++c) {
    const GradStats s = optimizers_[c]->grad_stats(norm_exclude_[c], Part::experts);
    experts.sum_sq += s.sum_sq;
    experts.finite = experts.finite && s.finite;
  }
  Collectives* group = worker_->model(0).tensor_parallel().expert_comm;
  TROUPE_CHECK(group != nullptr, worker_->name(), ": expert parallelism without an expert group");
  Tensor sums = Tensor::host(DType::f32, {2});
  sums.data_as<float>()[0] = float(experts.sum_sq);
  sums.data_as<float>()[1] = experts.finite ? 0.0f : 1.0f;
  host_all_reduce(context(), *group, sums);
  total.sum_sq += double(sums.data_as<float>()[0]);
  total.finite = total.finite && sums.data_as<float>()[1] == 0.0f;
  return total;
}

void StageOptimizer::await_state_readers() {
  fence_wait(context(), state_readers_);
  state_readers_.reset();
}

void StageOptimizer::apply(float lr, float clip, float loss_scale) {
  StageWorker& w = *worker_;
  await_state_readers();
  const NvtxRange range("optimizer step stage ", w.stage());
  for (auto& o : optimizers_) o->apply(lr, clip, loss_scale);
  if (!w.distributed_optimizer() || w.dp_group() == nullptr) return;
  // Every rank updated its shard of each bucket: gather the others' (over the bucket's group).
  for (const GradBucket& b : w.buckets()) {
    Collectives* group = bucket_group(w, b, w.dp_group());
    if (group == nullptr) continue;  // one rank holds these experts: its step updated them whole
    const OptimizerShard::Range s = bucket_shard(b, group);
    const Tensor p = w.model(b.chunk).params().slice(b.begin, {b.end - b.begin});
    group->all_gather(context(), p.slice(s.begin - b.begin, {s.end - s.begin}), p);
  }
}

void StageOptimizer::copy_state(StateCopy& copy) {
  const StageWorker& w = *worker_;
  const Context& own = context();
  own.activate();
  const Context* copier = copy.copier != nullptr ? copy.copier : &own;
  if (copier != &own) fence_wait(*copier, fence_record(own));  // after the last update
  copy.chunks.clear();
  for (int c = 0; c < chunks(); ++c) {
    const Optimizer& opt = *optimizers_[size_t(c)];
    TROUPE_CHECK(c == 0 || copy.step == opt.iteration(), w.name(), ": optimizer steps differ across chunks (",
                 copy.step, " vs ", opt.iteration(), ")");
    copy.step = opt.iteration();
    ChunkState s{.writer_id = copy.writer_id,
                 .layout = worker_->model(c).layout(),
                 .ranges = opt.shard().ranges,
                 .tensors = {},
                 .buffers = {}};
    if (s.ranges.empty()) s.ranges = {{0, s.layout.size()}};
    // Without the distributed optimizer the replicas hold the same state: data rank 0 writes
    // it, the other ranks of its expert group their experts (its shards partition it otherwise).
    s.experts_only = expert_parallel(*worker_) && w.dp_rank() != 0 && !w.distributed_optimizer();
    for (const auto& [prefix, src] : checkpoint_parts(opt, copy.with_moments)) {
      const Tensor& buf = copy.staging(src->numel());
      troupe::copy(*copier, *src, buf);
      s.tensors.emplace_back(prefix, buf);
    }
    // The MoE expert bias: the same on every replica, so one stores it. Small: a plain copy.
    if (w.dp_rank() == 0 && w.tp_rank() == 0)
      for (const auto& [name, t] : worker_->model(c).moe_buffers()) {
        Tensor host = Tensor::host(DType::f32, t.shape());
        troupe::copy(own, t, host);
        own.synchronize();
        s.buffers.emplace_back(name, host);
      }
    // FP8's scaling state: reduced over the tensor and data groups, so the same on every rank of
    // a stage; one stores it (host copies already).
    if (w.dp_rank() == 0 && w.tp_rank() == 0)
      for (auto& [name, host] : worker_->model(c).fp8_buffers()) s.buffers.emplace_back(name, host);
    copy.chunks.push_back(std::move(s));
  }
  copy.ready = nullptr;
  if (copier != &own) {
    copy.ready = fence_record(*copier);
    state_readers_ = copy.ready;  // the next update waits for the copies
  }
}

void StageOptimizer::skip() {
  for (auto& o : optimizers_) o->skip();
}

StepResult StageOptimizer::step_whole_model(float lr, float loss_scale) {
  const StageWorker& w = *worker_;
  TROUPE_CHECK(w.stages() == 1 && w.chunks() == 1 && !w.has_tied() && w.tp_size() == 1 && w.dp_size() == 1,
               "a whole-model optimizer step needs one stage holding the whole model, stage ", w.stage(), " of ",
               w.stages(), " holds ", w.chunks(), " chunk(s)");
  await_state_readers();
  const NvtxRange range("optimizer step stage ", w.stage());
  return optimizers_.front()->step(lr, loss_scale);
}

}  // namespace troupe::actors
