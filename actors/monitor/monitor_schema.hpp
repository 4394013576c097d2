// The monitor's wire format (version 1): what `troupe train` and `troupe serve` publish on its ZeroMQ socket
// (--monitor-endpoint) and `troupe monitor` reads. One ZeroMQ message = one msgpack map with
// string keys: the envelope (`version`, `type`, `seq`, `repeat`, `unix_ms`) and the fields of
// its type, listed below by monitor_fields(). README "Monitoring" documents the same schema.
//
// Compatibility: a reader rejects another `version` (with an error naming both), requires every
// field its version lists, and ignores keys it does not know, so adding a field keeps version 1;
// renaming, removing or changing the meaning of one needs version 2. The types `trace` and
// `stages` were added within version 1 (README "The wire format" says what that means for older
// readers); a reader should skip types it does not know. So was `serving` (`troupe serve`), with
// the hello's `kind` and `replicas`: a hello without them decodes as kind "train", replicas 0.
//
//   std::string bytes = monitor_encode({.seq = 7, .unix_ms = now, .body = MonitorEnd{100, "completed", ""}});
//   MonitorMessage m = monitor_decode(bytes);                  // throws troupe::Error
//   if (auto* it = std::get_if<MonitorIteration>(&m.body)) ...
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "base/check.hpp"
#include "schedules/trace.hpp"

namespace troupe::actors {

inline constexpr int kMonitorSchemaVersion = 1;

// The run's configuration, sent first and then every couple of seconds (also a heartbeat).
// A `troupe serve` process sends one too (kind "serve"): the model's shape, the replicas, the
// device; the training fields are 0 or empty.
struct MonitorHello {
  std::string run_id;  // host-pid-start: tells a restarted run at the same endpoint apart
  std::string host;
  int64_t pid = 0;
  int64_t start_unix_ms = 0;
  std::string model;  // --model preset the shape started from (serve: --hf or --load)
  int64_t num_layers = 0, hidden_size = 0, num_attention_heads = 0, seq_length = 0, vocab_size = 0;
  int64_t parameters = 0;
  int64_t tensor_parallel = 1, pipeline_parallel = 1, data_parallel = 1, virtual_chunks = 1;
  std::string schedule;  // "1f1b", "gpipe", "interleaved"
  int64_t micro_batch_size = 0, global_batch_size = 0, train_iters = 0, log_interval = 0, eval_interval = 0;
  int64_t start_iteration = 0;  // > 0 when resumed from a checkpoint
  std::string device_kind;      // "cuda" or "cpu"
  int64_t device_count = 0;
  std::string dtype;           // compute dtype: "f32", "bf16", "f16"
  double peak_tflops = 0;      // per device (--peak-tflops); 0: unknown, so no MFU
  std::string kind = "train";  // "train" or "serve"
  int64_t replicas = 0;        // serve: model replicas (worker actors); train: 0
};

// One training log line (--log-interval): the same numbers, means over the window like the log.
struct MonitorIteration {
  int64_t iteration = 0, train_iters = 0, consumed_samples = 0;
  int64_t window_iterations = 0;                                         // iterations the means cover
  double lm_loss = 0, learning_rate = 0, grad_norm = 0, loss_scale = 1;  // NaN loss/norm: all skipped
  int64_t skipped_iterations = 0, nan_iterations = 0;                    // in this window, as the log line
  double elapsed_ms_per_iteration = 0, tokens_per_second = 0, tflops_per_device = 0;
  double mfu = 0;                     // tflops_per_device / peak_tflops; NaN when the peak is unknown
  std::vector<int64_t> memory_bytes;  // in use per device (GPUs); empty for CPU devices
  int64_t host_memory_bytes = 0;      // resident memory of the process (CPU devices' memory); 0: unknown
  // Added within version 1 (an older run's record decodes with NaN, "" and []):
  double elapsed_seconds = NAN, eta_seconds = NAN;  // the log line's elapsed time and ETA (NaN: unknown)
  std::string stragglers;                           // the log's straggler sentences, "; " between; "" none
  std::vector<int64_t> straggler_devices;           // the devices (global ranks) they name
  // Mixture of experts (NaN and []: a dense model, or a record from before): the log line's
  // load_balancing_loss and z_loss (means over the window; NaN when the run has none), and per MoE
  // layer (its global number in moe_layers) the expert load of the window's last iteration: the
  // most tokens one expert got in a microbatch, and the mean per expert.
  double load_balancing_loss = NAN, z_loss = NAN;
  std::vector<int64_t> moe_layers, expert_load_max;
  std::vector<double> expert_load_mean;
};

struct MonitorValidation {
  int64_t iteration = 0;
  double lm_loss = 0, ppl = 0;  // the log's "lm loss value" and "lm loss PPL"
};

// The last message of a run.
struct MonitorEnd {
  int64_t iteration = 0;
  std::string reason;  // "completed", "stopped" (a signal) or "failed"
  std::string detail;  // human-readable: the signal, the error
};

// The trace events of one training iteration (or a part: a large iteration comes in several
// messages), as `troupe train --trace` would write them, with the trace file's header fields,
// so `troupe monitor --record` can write a trace file. Only one pipeline is traced: data rank
// 0, tensor rank 0 (the others run the same ops).
struct MonitorTrace {
  int64_t iteration = 0;
  std::string schedule;  // the trace header: "gpipe", "1f1b", "interleaved"
  int64_t stages = 1, chunks = 1, microbatches = 1, group_size = 0, num_layers = 0;
  // Added within version 1 (an older run's trace decodes with []):
  std::vector<int64_t> chunk_layers;  // layers of each virtual stage (an uneven split); empty: even
  int64_t dropped_events = 0;         // events the run dropped so far because the monitor was behind
  std::vector<schedules::TraceEvent> events;
};

// Where each pipeline stage's time went in one iteration (schedules/stage_time.hpp): arrays
// indexed by stage, nanoseconds; per stage the six add up to end_ns - start_ns.
struct MonitorStages {
  int64_t iteration = 0;
  int64_t start_ns = 0, end_ns = 0;  // the iteration's window on the run's trace clock
  std::vector<int64_t> busy_ns, communication_ns, data_ns, checkpoint_ns, optimizer_ns, idle_ns;
};

// `troupe serve`'s state, every interval_s (0.5 s): the inference pool's router and workers
// as of their latest reports, counters since the process started, rates over the latest
// rate_window_s, and latency quantiles over the recent requests (actors/serve/serving_stats.hpp).
struct MonitorServing {
  double interval_s = 0;  // how often a record comes
  int64_t replicas = 0;
  int64_t queue_length = 0;  // requests accepted and not yet running (the router's in flight - running)
  int64_t batch_size = 0;    // requests running (in the engines' batches), all replicas
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;  // KV cache blocks, all replicas
  int64_t requests = 0;                             // requests finished since the start (any finish reason)
  int64_t failed_requests = 0;                      // requests their engine refused or a failed step ended
  int64_t prompt_tokens = 0, generated_tokens = 0, engine_steps = 0;         // since the start
  double rate_window_s = 0, requests_per_second = 0, tokens_per_second = 0;  // generated tokens/s
  // Time to first token (submission to the first generated token) and time per output token
  // (first to last token / (tokens - 1)), seconds: quantiles over the latency window (NaN: no
  // request in it), sums and counts since the start (a Prometheus summary).
  double latency_window_s = 0;
  int64_t latency_samples = 0;  // requests the quantiles cover
  double ttft_p50_s = 0, ttft_p99_s = 0, tpot_p50_s = 0, tpot_p99_s = 0;
  double ttft_sum_s = 0, tpot_sum_s = 0;
  int64_t ttft_count = 0, tpot_count = 0;
};

using MonitorBody = std::variant<MonitorHello, MonitorIteration, MonitorValidation, MonitorEnd, MonitorTrace,
                                 MonitorStages, MonitorServing>;

struct MonitorMessage {
  uint64_t seq = 0;     // the publisher's count of fresh messages, from 1; a repeat keeps its own
  bool repeat = false;  // a re-send of an earlier message, for subscribers that attached late
  int64_t unix_ms = 0;  // wall clock when first published
  MonitorBody body;
};

// "hello", "iteration", "validation", "end", "trace", "stages", "serving".
const char* monitor_type_name(const MonitorBody& body);

std::string monitor_encode(const MonitorMessage& message);
// A message of a type this build does not know (a newer run's): readers skip it.
class UnknownMonitorType : public Error {
 public:
  using Error::Error;
};

// Throws troupe::Error on malformed bytes, another schema version, or a missing or mistyped
// field (each named); UnknownMonitorType on a well-formed message of an unknown type.
MonitorMessage monitor_decode(std::string_view bytes);

// The fields of each type, in wire order: f(key, member). Encoding, decoding and JSON output
// all walk these lists, so a field is added in one place.
template <class M, class F>
requires std::same_as<std::remove_const_t<M>, MonitorHello>
void monitor_fields(M& m, F&& f) {
  f("run_id", m.run_id), f("host", m.host), f("pid", m.pid), f("start_unix_ms", m.start_unix_ms);
  f("model", m.model), f("num_layers", m.num_layers), f("hidden_size", m.hidden_size);
  f("num_attention_heads", m.num_attention_heads), f("seq_length", m.seq_length), f("vocab_size", m.vocab_size);
  f("parameters", m.parameters);
  f("tensor_parallel", m.tensor_parallel), f("pipeline_parallel", m.pipeline_parallel);
  f("data_parallel", m.data_parallel), f("virtual_chunks", m.virtual_chunks), f("schedule", m.schedule);
  f("micro_batch_size", m.micro_batch_size), f("global_batch_size", m.global_batch_size);
  f("train_iters", m.train_iters), f("log_interval", m.log_interval), f("eval_interval", m.eval_interval);
  f("start_iteration", m.start_iteration);
  f("device_kind", m.device_kind), f("device_count", m.device_count), f("dtype", m.dtype);
  f("peak_tflops", m.peak_tflops), f("kind", m.kind), f("replicas", m.replicas);
}

template <class M, class F>
requires std::same_as<std::remove_const_t<M>, MonitorIteration>
void monitor_fields(M& m, F&& f) {
  f("iteration", m.iteration), f("train_iters", m.train_iters), f("consumed_samples", m.consumed_samples);
  f("window_iterations", m.window_iterations);
  f("lm_loss", m.lm_loss), f("learning_rate", m.learning_rate), f("grad_norm", m.grad_norm);
  f("loss_scale", m.loss_scale);
  f("skipped_iterations", m.skipped_iterations), f("nan_iterations", m.nan_iterations);
  f("elapsed_ms_per_iteration", m.elapsed_ms_per_iteration), f("tokens_per_second", m.tokens_per_second);
  f("tflops_per_device", m.tflops_per_device), f("mfu", m.mfu);
  f("memory_bytes", m.memory_bytes), f("host_memory_bytes", m.host_memory_bytes);
  f("elapsed_seconds", m.elapsed_seconds), f("eta_seconds", m.eta_seconds);
  f("stragglers", m.stragglers), f("straggler_devices", m.straggler_devices);
  f("load_balancing_loss", m.load_balancing_loss), f("z_loss", m.z_loss), f("moe_layers", m.moe_layers);
  f("expert_load_max", m.expert_load_max), f("expert_load_mean", m.expert_load_mean);
}

template <class M, class F>
requires std::same_as<std::remove_const_t<M>, MonitorValidation>
void monitor_fields(M& m, F&& f) { f("iteration", m.iteration), f("lm_loss", m.lm_loss), f("ppl", m.ppl); }

template <class M, class F>
requires std::same_as<std::remove_const_t<M>, MonitorEnd>
void monitor_fields(M& m, F&& f) { f("iteration", m.iteration), f("reason", m.reason), f("detail", m.detail); }

template <class M, class F>
requires std::same_as<std::remove_const_t<M>, MonitorTrace>
void monitor_fields(M& m, F&& f) {
  f("iteration", m.iteration), f("schedule", m.schedule), f("stages", m.stages), f("chunks", m.chunks);
  f("microbatches", m.microbatches), f("group_size", m.group_size), f("num_layers", m.num_layers);
  f("chunk_layers", m.chunk_layers), f("dropped_events", m.dropped_events), f("events", m.events);
}

template <class M, class F>
requires std::same_as<std::remove_const_t<M>, MonitorStages>
void monitor_fields(M& m, F&& f) {
  f("iteration", m.iteration), f("start_ns", m.start_ns), f("end_ns", m.end_ns);
  f("busy_ns", m.busy_ns), f("communication_ns", m.communication_ns), f("data_ns", m.data_ns);
  f("checkpoint_ns", m.checkpoint_ns), f("optimizer_ns", m.optimizer_ns), f("idle_ns", m.idle_ns);
}

template <class M, class F>
requires std::same_as<std::remove_const_t<M>, MonitorServing>
void monitor_fields(M& m, F&& f) {
  f("interval_s", m.interval_s), f("replicas", m.replicas), f("queue_length", m.queue_length);
  f("batch_size", m.batch_size), f("kv_blocks_used", m.kv_blocks_used), f("kv_blocks_total", m.kv_blocks_total);
  f("requests", m.requests), f("failed_requests", m.failed_requests), f("prompt_tokens", m.prompt_tokens);
  f("generated_tokens", m.generated_tokens), f("engine_steps", m.engine_steps);
  f("rate_window_s", m.rate_window_s), f("requests_per_second", m.requests_per_second);
  f("tokens_per_second", m.tokens_per_second), f("latency_window_s", m.latency_window_s);
  f("latency_samples", m.latency_samples), f("ttft_p50_s", m.ttft_p50_s), f("ttft_p99_s", m.ttft_p99_s);
  f("tpot_p50_s", m.tpot_p50_s), f("tpot_p99_s", m.tpot_p99_s), f("ttft_sum_s", m.ttft_sum_s);
  f("ttft_count", m.ttft_count), f("tpot_sum_s", m.tpot_sum_s), f("tpot_count", m.tpot_count);
}

// The per-stage states of a `stages` record by name, in precedence order: f(state, nanoseconds per stage).
template <class M, class F>
requires std::same_as<std::remove_const_t<M>, MonitorStages>
void monitor_stage_states(M& m, F&& f) {
  f("busy", m.busy_ns), f("communication", m.communication_ns), f("data", m.data_ns);
  f("checkpoint", m.checkpoint_ns), f("optimizer", m.optimizer_ns), f("idle", m.idle_ns);
}

}  // namespace troupe::actors
