#include "apps/train/train_monitor.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "apps/common/monitor_flags.hpp"
#include "base/check.hpp"

namespace troupe::apps {

namespace {
// Resident memory of this process (/proc/self/statm: pages); 0 when it cannot be read.
int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long size = 0, resident = 0;
  const int read = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  return read == 2 && page > 0 ? int64_t(resident) * page : 0;
}
}  // namespace

actors::MonitorHello train_monitor_hello(const actors::TrainingConfig& cfg, const TrainMonitorInfo& info) {
  actors::MonitorHello h;
  stamp_monitor_hello(h);
  h.model = info.model;
  const GptConfig& m = cfg.model;
  h.num_layers = m.num_layers, h.hidden_size = m.hidden_size, h.num_attention_heads = m.num_attention_heads;
  h.seq_length = m.seq_length, h.vocab_size = m.vocab_size, h.parameters = m.num_parameters();
  const actors::ParallelConfig& p = cfg.parallel;
  h.tensor_parallel = p.tensor_size, h.pipeline_parallel = p.pipeline_size, h.data_parallel = p.data_size;
  h.virtual_chunks = p.virtual_chunks;
  h.schedule = p.virtual_chunks > 1 ? "interleaved" : schedules::schedule_name(p.schedule);
  h.micro_batch_size = cfg.micro_batch_size, h.global_batch_size = cfg.global_batch_size;
  h.train_iters = cfg.train_iters, h.log_interval = info.log_interval, h.eval_interval = info.eval_interval;
  h.start_iteration = info.start_iteration;
  h.device_kind = cfg.devices.cuda ? "cuda" : "cpu";
  h.device_count = info.devices;
  h.dtype = dtype_name(cfg.devices.compute);
  h.peak_tflops = info.peak_tflops;
  return h;
}

void start_train_monitor(actors::TrainingRun& run, const actors::MonitorOptions& options,
                         const actors::MonitorHello& hello) {
  print_monitor_addresses(run.start_monitor(options, hello));
}

actors::MonitorIteration monitor_iteration(const LogWindow& w, int64_t tokens_per_iteration, double peak_tflops,
                                           std::vector<int64_t> memory_bytes) {
  actors::MonitorIteration it;
  it.iteration = w.iteration, it.train_iters = w.train_iters, it.consumed_samples = w.consumed_samples;
  it.window_iterations = w.iterations;
  it.lm_loss = w.loss, it.learning_rate = w.lr, it.grad_norm = w.grad_norm, it.loss_scale = w.loss_scale;
  it.skipped_iterations = w.skipped, it.nan_iterations = w.nan;
  it.elapsed_ms_per_iteration = w.ms_per_iteration;
  it.tokens_per_second = w.ms_per_iteration > 0 ? double(tokens_per_iteration) / (w.ms_per_iteration / 1e3) : 0;
  it.tflops_per_device = w.tflops_per_device;
  it.mfu = peak_tflops > 0 ? w.tflops_per_device / peak_tflops : NAN;
  it.memory_bytes = std::move(memory_bytes);
  it.host_memory_bytes = resident_bytes();
  it.elapsed_seconds = w.elapsed_seconds, it.eta_seconds = w.eta_seconds;
  for (const std::string& s : w.stragglers) {
    if (!it.stragglers.empty()) it.stragglers += "; ";
    it.stragglers += s;
  }
  it.straggler_devices = w.straggler_devices;
  it.load_balancing_loss = w.load_balancing_loss, it.z_loss = w.z_loss;
  for (const MoeExpertLoad& l : w.expert_load) {
    it.moe_layers.push_back(l.layer);
    it.expert_load_max.push_back(l.tokens_max);
    it.expert_load_mean.push_back(l.tokens_mean);
  }
  return it;
}

void publish_log_line(actors::TrainingRun& run, const LogWindow& w, int64_t tokens_per_iteration, double peak_tflops) {
  if (!run.monitoring()) return;  // monitoring off costs nothing, not even the memory query
  run.publish(monitor_iteration(w, tokens_per_iteration, peak_tflops, run.device_memory_in_use()));
}

void publish_validation(actors::TrainingRun& run, int64_t iteration, double loss) {
  run.publish(actors::MonitorValidation{.iteration = iteration, .lm_loss = loss, .ppl = perplexity(loss)});
}

void publish_end(actors::TrainingRun& run, int signal) {
  actors::MonitorEnd end{.iteration = run.iteration(), .reason = "completed", .detail = ""};
  if (signal != 0) end.reason = "stopped", end.detail = str_cat("stopped by signal ", signal);
  run.publish(std::move(end));
}

}  // namespace troupe::apps
