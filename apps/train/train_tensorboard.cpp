#include "apps/train/train_tensorboard.hpp"

#include "base/log.hpp"

namespace troupe::apps {

TrainTensorBoard::TrainTensorBoard(const std::string& dir) {
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
