#include "model/train/trainer.hpp"

#include "base/check.hpp"

namespace troupe {

int64_t count_targets(const Tensor& targets) {
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += targets.data_as<int32_t>()[i] >= 0;
  return n;
}

double sum_losses(const Tensor& losses) {
  double s = 0;
  for (int64_t i = 0; i < losses.numel(); ++i) s += losses.data_as<float>()[i];
  return s;
}

Trainer::Trainer(GptChunk& chunk, Optimizer& optimizer, const LrSchedule& schedule, LossScaler* scaler, uint64_t seed)
    : chunk_(chunk), optimizer_(optimizer), schedule_(schedule), scaler_(scaler), seed_(seed) {
  const ChunkSpec& spec = chunk.layout().spec();
  TROUPE_CHECK(spec.pre_process && spec.post_process, "Trainer runs a whole model on one device");
}

IterationStats Trainer::train_step(const std::vector<Batch>& microbatches) {
  TROUPE_CHECK(!microbatches.empty(), "train_step: no microbatches");
  IterationStats s;
  s.iteration = ++iteration_;
  s.lr = schedule_.at(updates_);
  s.loss_scale = scaler_ ? scaler_->scale() : 1.0f;
  for (const Batch& b : microbatches) s.tokens += count_targets(b.targets);
  TROUPE_CHECK(s.tokens > 0, "train_step: every target of the batch is ignored");

  const float grad_scale = s.loss_scale / float(s.tokens);
  double loss_sum = 0;
  for (size_t m = 0; m < microbatches.size(); ++m) {
    // A distinct dropout stream per (iteration, microbatch).
    const uint64_t dropout_seed = seed_ * 0x9e3779b97f4a7c15ull + uint64_t(iteration_) * 1024 + m;
    ActivationsPtr a = chunk_.forward(microbatches[m].tokens, microbatches[m].targets, Tensor(),
                                      {.training = true,
                                       .loss_grad_scale = grad_scale,
                                       .dropout_seed = dropout_seed,
                                       .moe_loss_grad_scale = s.loss_scale / float(microbatches.size())});
    chunk_.backward(*a, Tensor(), Tensor());
    loss_sum += sum_losses(to_host_f32(chunk_.context(), a->losses));
    chunk_.release(std::move(a));
  }
  s.loss = loss_sum / double(s.tokens);
  s.moe = summarize_moe_stats(chunk_.take_moe_stats());
  chunk_.fp8_update_scales();  // delayed FP8 scaling: the next step's scales from this one's amaxes

  const StepResult r = optimizer_.step(float(s.lr), s.loss_scale);
  s.skipped = r.skipped;
  s.grad_norm = r.grad_norm;
  if (scaler_) scaler_->update(r.skipped);
  if (!r.skipped) ++updates_;  // Megatron steps its scheduler only after a successful update
  s.next_lr = schedule_.at(updates_);
  return s;
}

double Trainer::evaluate(const std::vector<Batch>& microbatches) {
  double loss_sum = 0;
  int64_t tokens = 0;
  for (const Batch& b : microbatches) {
    ActivationsPtr a = chunk_.forward(b.tokens, b.targets, Tensor(), {.training = false});
    loss_sum += sum_losses(to_host_f32(chunk_.context(), a->losses));
    tokens += count_targets(b.targets);
    chunk_.release(std::move(a));
  }
  TROUPE_CHECK(tokens > 0, "evaluate: every target is ignored");
  return loss_sum / double(tokens);
}

}  // namespace troupe
