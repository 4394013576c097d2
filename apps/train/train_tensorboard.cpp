#include "apps/train/train_tensorboard.hpp"

#include "base/check.hpp"
#include "base/log.hpp"

namespace troupe::apps {

TrainTensorBoard::TrainTensorBoard(const std::string& dir, bool moe_load_balancing, bool moe_z_loss)
    : moe_load_balancing_(moe_load_balancing), moe_z_loss_(moe_z_loss) {
  if (dir.empty()) return;
  writer_ = std::make_unique<TensorBoardWriter>(dir);
  logger("tensorboard").info("writing ", writer_->path());
}

void TrainTensorBoard::both(const std::string& tag, double value, int64_t step, int64_t samples) {
  writer_->add_scalar(tag, value, step);
  writer_->add_scalar(tag + " vs samples", value, samples);
}

void TrainTensorBoard::iteration(const IterationStats& s, int64_t consumed_samples, int64_t global_batch_size) {
  if (!writer_) return;
  both("learning-rate", s.next_lr, s.iteration, consumed_samples);  // Megatron's: after the step
  both("batch-size", double(global_batch_size), s.iteration, consumed_samples);
  if (!s.skipped) both("lm loss", s.loss, s.iteration, consumed_samples);
  both("loss-scale", s.loss_scale, s.iteration, consumed_samples);
  if (!s.skipped) both("grad-norm", s.grad_norm, s.iteration, consumed_samples);
  if (!s.skipped && s.moe.any()) moe(s);
}

void TrainTensorBoard::moe(const IterationStats& s) {
  // Megatron's track_moe_metrics tags for the losses; the expert load under "moe/", per layer.
  if (moe_load_balancing_) writer_->add_scalar("load_balancing_loss", s.moe.load_balancing_loss, s.iteration);
  if (moe_z_loss_) writer_->add_scalar("z_loss", s.moe.z_loss, s.iteration);
  for (const MoeExpertLoad& l : s.moe.expert_load) {
    writer_->add_scalar(str_cat("moe/expert_load_max_layer_", l.layer), double(l.tokens_max), s.iteration);
    writer_->add_scalar(str_cat("moe/expert_load_mean_layer_", l.layer), l.tokens_mean, s.iteration);
  }
}

void TrainTensorBoard::log_line(const LogWindow& w, const actors::TrainingRun& run) {
  if (!writer_) return;
  const std::vector<int64_t> memory_bytes = run.device_memory_in_use();
  writer_->add_scalar("iteration-time", w.ms_per_iteration / 1e3, w.iteration);
  writer_->add_scalar("throughput", w.tflops_per_device, w.iteration);
  if (!memory_bytes.empty()) writer_->add_scalar("mem-reserved-bytes", double(memory_bytes[0]), w.iteration);
  writer_->flush();  // TensorBoard shows the run as it goes
}

void TrainTensorBoard::validation(int64_t iteration, double loss, int64_t consumed_samples) {
  if (!writer_) return;
  both("lm loss validation", loss, iteration, consumed_samples);
  both("lm loss validation ppl", perplexity(loss), iteration, consumed_samples);
  writer_->flush();
}

}  // namespace troupe::apps
