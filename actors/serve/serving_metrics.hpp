// GET /metrics of `troupe serve`'s API port: Prometheus text with vLLM's metric names, counted
// by the inference pool as requests' events arrive (InferencePool::submit), so every API path
// (completions, chat, streaming, /api) is counted once.
//   vllm:num_requests_running / _waiting           gauges: requests with / without a first token
//   vllm:prompt_tokens_total / generation_tokens_total  counters
//   vllm:time_to_first_token_seconds, vllm:time_per_output_token_seconds,
//   vllm:e2e_request_latency_seconds               histograms (vLLM's buckets)
//
//   ServingMetrics m;
//   auto progress = m.on_submitted(now);          // per request
//   m.on_event(*progress, event, prompt_tokens, now);   // each token event; the last one finishes it
//   std::string text = m.prometheus("troupe");
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/serve/serving_stats.hpp"

namespace troupe::actors {

// A Prometheus histogram: cumulative counts per upper bound, a sum and a count.
class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> bounds);
  void observe(double seconds);
  // `# TYPE name histogram` and its _bucket / _sum / _count lines with `labels` ("model_name=\"x\"").
  std::string text(const std::string& name, const std::string& help, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bound, not cumulative; the last one is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// One request's progress, kept with its callback.
struct RequestProgress {
  ServingClock::time_point submitted{}, first_token{}, last_token{};
  int64_t tokens = 0;
  bool finished = false;
};

class ServingMetrics {
 public:
  ServingMetrics();
  std::shared_ptr<RequestProgress> on_submitted(ServingClock::time_point now);
  void on_event(RequestProgress& p, const TokenEvent& e, int64_t prompt_tokens, ServingClock::time_point now);
  // A request that ended without its final event (refused by its engine).
  void on_failed(RequestProgress& p);
  std::string prometheus(const std::string& model_name) const;

 private:
  void end(RequestProgress& p);  // mu_ held
  mutable std::mutex mu_;
  int64_t waiting_ = 0, running_ = 0, prompt_tokens_ = 0, generation_tokens_ = 0, finished_ = 0;
  LatencyHistogram ttft_, tpot_, e2e_;
};

}  // namespace troupe::actors
