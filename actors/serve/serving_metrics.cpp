#include "actors/serve/serving_metrics.hpp"

#include <algorithm>
#include <limits>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

double seconds(ServingClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string number_text(double x) { return str_cat(x); }

std::string gauge(const std::string& name, const std::string& type, const std::string& help, const std::string& labels,
                  int64_t value) {
  return str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, "{", labels, "} ", value, "\n");
}

}  // namespace

LatencyHistogram::LatencyHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void LatencyHistogram::observe(double s) {
  const size_t at = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), s) - bounds_.begin());  // le: s <= bound
  ++counts_[at];
  sum_ += s;
  ++count_;
}

std::string LatencyHistogram::text(const std::string& name, const std::string& help, const std::string& labels) const {
  std::string out = str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number_text(bounds_[i]) : "+Inf";
    out += str_cat(name, "_bucket{", labels, ",le=\"", le, "\"} ", cumulative, "\n");
  }
  out += str_cat(name, "_sum{", labels, "} ", number_text(sum_), "\n");
  out += str_cat(name, "_count{", labels, "} ", count_, "\n");
  return out;
}

// vLLM's buckets.
ServingMetrics::ServingMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      tpot_(
          {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {}

std::shared_ptr<RequestProgress> ServingMetrics::on_submitted(ServingClock::time_point now) {
  auto p = std::make_shared<RequestProgress>();
  p->submitted = now;
  std::lock_guard lock(mu_);
  ++waiting_;
  return p;
}

void ServingMetrics::on_event(RequestProgress& p, const TokenEvent& e, int64_t prompt_tokens,
                              ServingClock::time_point now) {
  std::lock_guard lock(mu_);
  if (p.finished) return;
  if (e.has_token) {
    if (p.tokens == 0) {
      p.first_token = now;
      ttft_.observe(seconds(now - p.submitted));
      --waiting_;
      ++running_;
    } else {
      tpot_.observe(seconds(now - p.last_token));  // vLLM: the time between successive tokens
    }
    p.last_token = now;
    ++p.tokens;
    ++generation_tokens_;
  }
  if (e.finish != FinishReason::none) {
    prompt_tokens_ += prompt_tokens;
    e2e_.observe(seconds(now - p.submitted));
    end(p);
  }
}

void ServingMetrics::on_failed(RequestProgress& p) {
  std::lock_guard lock(mu_);
  if (!p.finished) end(p);
}

void ServingMetrics::end(RequestProgress& p) {
  p.finished = true;
  if (p.tokens > 0)
    --running_;
  else
    --waiting_;
  ++finished_;
}

std::string ServingMetrics::prometheus(const std::string& model_name) const {
  const std::string labels = str_cat("model_name=\"", model_name, "\"");
  std::lock_guard lock(mu_);
  return gauge("vllm:num_requests_running", "gauge", "Requests generating (a first token out).", labels, running_) +
         gauge("vllm:num_requests_waiting", "gauge", "Requests waiting for their first token.", labels, waiting_) +
         gauge("vllm:prompt_tokens_total", "counter", "Prompt tokens of finished requests.", labels, prompt_tokens_) +
         gauge("vllm:generation_tokens_total", "counter", "Generated tokens.", labels, generation_tokens_) +
         gauge("vllm:request_success_total", "counter", "Requests finished.", labels, finished_) +
         ttft_.text("vllm:time_to_first_token_seconds", "Time to the first token.", labels) +
         tpot_.text("vllm:time_per_output_token_seconds", "Time between successive tokens.", labels) +
         e2e_.text("vllm:e2e_request_latency_seconds", "Time from submission to the last token.", labels);
}

}  // namespace troupe::actors
