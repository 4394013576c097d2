#include "actors/monitor/monitor_metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/check.hpp"

namespace troupe::actors {

std::string prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest form that reads back as v
  return std::string(buf, r.ptr);
}

std::string prometheus_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {

// Appends one metric family: HELP, TYPE, and its samples.
class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void sample(const char* name, double v, const std::string& labels = "") {
    out_ += str_cat(name, labels.empty() ? "" : "{" + labels + "}", " ", prometheus_number(v), "\n");
  }
  void gauge(const char* name, const char* help, double v) {
    family(name, "gauge", help);
    sample(name, v);
  }
  void counter(const char* name, const char* help, double v) {
    family(name, "counter", help);
    sample(name, v);
  }
  // A summary of seconds: the p50 and p99 (NaN when no sample), the sum and count.
  void summary(const char* name, const char* help, double p50, double p99, double sum, int64_t count) {
    family(name, "summary", help);
    sample(name, p50, "quantile=\"0.5\"");
    sample(name, p99, "quantile=\"0.99\"");
    sample(str_cat(name, "_sum").c_str(), sum);
    sample(str_cat(name, "_count").c_str(), double(count));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// troupe serve's families (README "Serving metrics").
void render_serving(Exposition& x, const MonitorServing& s) {
  x.gauge("troupe_serving_queue_length", "Requests accepted and not yet running (waiting for a batch slot).",
          double(s.queue_length));
  x.gauge("troupe_serving_batch_size", "Requests running in the engines' batches, all replicas.", double(s.batch_size));
  x.gauge("troupe_serving_kv_blocks_used", "KV cache blocks held by requests, all replicas.", double(s.kv_blocks_used));
  x.gauge("troupe_serving_kv_blocks_total", "KV cache blocks, all replicas.", double(s.kv_blocks_total));
  x.counter("troupe_serving_requests_total", "Requests finished since the server started.", double(s.requests));
  x.counter("troupe_serving_failed_requests_total", "Requests refused by their engine or ended by a failed step.",
            double(s.failed_requests));
  x.counter("troupe_serving_prompt_tokens_total", "Prompt tokens of the finished requests.", double(s.prompt_tokens));
  x.counter("troupe_serving_generated_tokens_total", "Tokens generated since the server started.",
            double(s.generated_tokens));
  x.counter("troupe_serving_engine_steps_total", "Engine steps (batched forwards), all replicas.",
            double(s.engine_steps));
  x.gauge("troupe_serving_requests_per_second", "Requests finished per second over the latest rate window (10 s).",
          s.requests_per_second);
  x.gauge("troupe_serving_tokens_per_second", "Tokens generated per second over the latest rate window (10 s).",
          s.tokens_per_second);
  x.summary("troupe_serving_time_to_first_token_seconds",
            "Time from a request's submission to its first token: quantiles over the requests of the last 60 s.",
            s.ttft_p50_s, s.ttft_p99_s, s.ttft_sum_s, s.ttft_count);
  x.summary("troupe_serving_time_per_output_token_seconds",
            "Time per output token after the first: quantiles over the requests of the last 60 s.", s.tpot_p50_s,
            s.tpot_p99_s, s.tpot_sum_s, s.tpot_count);
}

// Mixture of experts: the log line's router losses and the per-layer expert load.
void render_moe(Exposition& x, const MonitorIteration& it) {
  if (!std::isnan(it.load_balancing_loss))
    x.gauge("troupe_moe_load_balancing_loss", "MoE load-balancing loss, mean over the latest log window.",
            it.load_balancing_loss);
  if (!std::isnan(it.z_loss))
    x.gauge("troupe_moe_z_loss", "MoE router z-loss, mean over the latest log window.", it.z_loss);
  const size_t layers = std::min({it.moe_layers.size(), it.expert_load_max.size(), it.expert_load_mean.size()});
  if (layers == 0) return;
  x.family("troupe_moe_expert_load_max", "gauge",
           "Most tokens one expert of an MoE layer got in a microbatch, at the latest logged iteration.");
  for (size_t l = 0; l < layers; ++l)
    x.sample("troupe_moe_expert_load_max", double(it.expert_load_max[l]), str_cat("layer=\"", it.moe_layers[l], "\""));
  x.family("troupe_moe_expert_load_mean", "gauge",
           "Mean tokens per expert of an MoE layer and microbatch, at the latest logged iteration.");
  for (size_t l = 0; l < layers; ++l)
    x.sample("troupe_moe_expert_load_mean", it.expert_load_mean[l], str_cat("layer=\"", it.moe_layers[l], "\""));
}

}  // namespace

void MonitorMetrics::update(const MonitorMessage& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (message.repeat) return;  // already counted when it was fresh
  if (const auto* h = std::get_if<MonitorHello>(&message.body)) {
    hello_ = *h;
  } else if (const auto* it = std::get_if<MonitorIteration>(&message.body)) {
    iteration_ = *it;
    iteration_unix_ms_ = message.unix_ms;
    skipped_total_ += it->skipped_iterations;
    nan_total_ += it->nan_iterations;
  } else if (const auto* v = std::get_if<MonitorValidation>(&message.body)) {
    validation_ = *v;
  } else if (const auto* e = std::get_if<MonitorEnd>(&message.body)) {
    end_ = *e;
  } else if (const auto* t = std::get_if<MonitorTrace>(&message.body)) {
    trace_events_ += int64_t(t->events.size());
    trace_dropped_ = t->dropped_events;
  } else if (const auto* sv = std::get_if<MonitorServing>(&message.body)) {
    serving_ = *sv;
  } else if (const auto* st = std::get_if<MonitorStages>(&message.body)) {
    stages_ = *st;
    monitor_stage_states(*st, [&](const char* state, const std::vector<int64_t>& ns) {
      for (size_t s = 0; s < ns.size(); ++s) stage_ns_total_[{state, s}] += ns[s];
    });
  }
}

void MonitorMetrics::set_publisher_counts(uint64_t sent, uint64_t refused, uint64_t subscriptions) {
  std::lock_guard<std::mutex> lock(mutex_);
  sent_ = sent, refused_ = refused, subscriptions_ = subscriptions;
}

// Longer than our functions usually are: one metric family after another, a table rather than logic.
// NOLINTNEXTLINE(readability-function-size)
std::string MonitorMetrics::prometheus_text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Exposition x;
  if (hello_) {
    const MonitorHello& h = *hello_;
    x.family("troupe_info", "gauge", "The run's configuration as labels (value 1).");
    x.sample("troupe_info", 1,
             str_cat("run_id=\"", prometheus_label(h.run_id), "\",kind=\"", prometheus_label(h.kind), "\",model=\"",
                     prometheus_label(h.model), "\",device_kind=\"", prometheus_label(h.device_kind), "\",dtype=\"",
                     prometheus_label(h.dtype), "\",schedule=\"", prometheus_label(h.schedule), "\",tensor_parallel=\"",
                     h.tensor_parallel, "\",pipeline_parallel=\"", h.pipeline_parallel, "\",data_parallel=\"",
                     h.data_parallel, "\""));
    if (h.kind == "serve") {
      x.gauge("troupe_serving_replicas", "Model replicas serving (worker actors, --devices).", double(h.replicas));
    } else {
      x.gauge("troupe_train_iters", "Iterations the run trains for (--train-iters).", double(h.train_iters));
      x.gauge("troupe_global_batch_size", "Sequences per iteration (--global-batch-size).",
              double(h.global_batch_size));
    }
    x.gauge("troupe_parameters", "Parameters of the model.", double(h.parameters));
    x.gauge("troupe_start_time_seconds", "Unix time the run started (its monitor came up).",
            double(h.start_unix_ms) / 1e3);
  }
  if (iteration_) {
    const MonitorIteration& it = *iteration_;
    x.gauge("troupe_iteration", "Iteration of the latest log line.", double(it.iteration));
    x.gauge("troupe_consumed_samples", "Training samples consumed so far.", double(it.consumed_samples));
    x.gauge("troupe_lm_loss", "Training lm loss, mean over the latest log window (the log's \"lm loss\").", it.lm_loss);
    x.gauge("troupe_learning_rate", "Learning rate at the latest logged iteration.", it.learning_rate);
    x.gauge("troupe_grad_norm", "Gradient norm before clipping, mean over the latest log window.", it.grad_norm);
    x.gauge("troupe_loss_scale", "Loss scale (fp16; 1 otherwise).", it.loss_scale);
    x.counter("troupe_skipped_iterations_total", "Iterations skipped (inf/nan gradients) since this process started.",
              double(skipped_total_));
    x.counter("troupe_nan_iterations_total", "Iterations with a NaN loss since this process started.",
              double(nan_total_));
    x.gauge("troupe_iteration_time_seconds", "Elapsed time per iteration, mean over the latest log window.",
            it.elapsed_ms_per_iteration / 1e3);
    x.gauge("troupe_tokens_per_second", "Training tokens per second over the latest log window.", it.tokens_per_second);
    x.gauge("troupe_tflops_per_device", "Model TFLOP/s per device over the latest log window (the log's throughput).",
            it.tflops_per_device);
    if (!std::isnan(it.mfu))
      x.gauge("troupe_mfu", "Model FLOPs utilization: TFLOP/s per device / peak (--peak-tflops).", it.mfu);
    if (!it.memory_bytes.empty()) {
      x.family("troupe_device_memory_bytes", "gauge", "Device memory in use (all processes), per GPU.");
      for (size_t d = 0; d < it.memory_bytes.size(); ++d)
        x.sample("troupe_device_memory_bytes", double(it.memory_bytes[d]), str_cat("device=\"", d, "\""));
    }
    if (it.host_memory_bytes > 0)
      x.gauge("troupe_host_memory_bytes", "Resident memory of the training process (CPU devices' memory).",
              double(it.host_memory_bytes));
    render_moe(x, it);
    x.gauge("troupe_last_log_time_seconds", "Unix time of the latest log line (staleness alerts).",
            double(iteration_unix_ms_) / 1e3);
  }
  if (validation_) {
    x.gauge("troupe_validation_iteration", "Iteration of the latest validation.", double(validation_->iteration));
    x.gauge("troupe_validation_lm_loss", "Validation lm loss at the latest validation.", validation_->lm_loss);
    x.gauge("troupe_validation_ppl", "Validation perplexity at the latest validation.", validation_->ppl);
  }
  if (stages_) {
    const MonitorStages& st = *stages_;
    x.gauge("troupe_traced_iteration", "Iteration of the latest per-stage time breakdown.", double(st.iteration));
    x.family("troupe_stage_busy_ratio", "gauge",
             "Share of the latest traced iteration a pipeline stage spent computing (forward and backward).");
    const double window = double(std::max<int64_t>(st.end_ns - st.start_ns, 1));
    for (size_t s = 0; s < st.busy_ns.size(); ++s)
      x.sample("troupe_stage_busy_ratio", double(st.busy_ns[s]) / window, str_cat("stage=\"", s, "\""));
    x.family("troupe_stage_seconds_total", "counter",
             "Time of each pipeline stage by state (busy, communication, data, checkpoint, optimizer, idle), summed "
             "over the traced iterations.");
    for (const auto& [key, ns] : stage_ns_total_)
      x.sample("troupe_stage_seconds_total", double(ns) / 1e9,
               str_cat("stage=\"", key.second, "\",state=\"", key.first, "\""));
  }
  if (serving_) render_serving(x, *serving_);
  x.counter("troupe_trace_events_total", "Trace events the monitor received from the run.", double(trace_events_));
  x.counter("troupe_trace_events_dropped_total", "Trace events the run dropped because the monitor was behind.",
            double(trace_dropped_));
  x.gauge("troupe_run_ended", "1 once training has ended (completed, stopped or failed).", end_ ? 1 : 0);
  x.counter("troupe_monitor_messages_sent_total", "Messages handed to the monitor's ZeroMQ socket.", double(sent_));
  x.counter("troupe_monitor_messages_refused_total", "Messages the monitor's ZeroMQ socket refused (not sent).",
            double(refused_));
  x.counter("troupe_monitor_subscriptions_total", "Subscribers that attached (troupe monitor).",
            double(subscriptions_));
  return x.take();
}

std::string MonitorMetrics::health_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* status = end_ ? "ended" : iteration_ ? "training" : serving_ ? "serving" : "starting";
  std::string out = str_cat("{\"status\": \"", status, "\", \"iteration\": ", iteration_ ? iteration_->iteration : 0,
                            ", \"train_iters\": ", hello_ ? hello_->train_iters : 0);
  if (end_) out += str_cat(", \"reason\": \"", end_->reason, "\"");
  return out + "}\n";
}

}  // namespace troupe::actors
