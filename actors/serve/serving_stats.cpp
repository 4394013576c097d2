#include "actors/serve/serving_stats.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"

namespace troupe::actors {

namespace {
double seconds(ServingClock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

double nearest_rank_quantile(std::vector<double>& values, double q) {
  if (values.empty()) return NAN;
  const size_t rank = size_t(std::ceil(q * double(values.size())));  // 1-based
  const size_t at = std::clamp<size_t>(rank, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + ptrdiff_t(at), values.end());
  return values[at];
}

void WorkerServingStats::on_token(RequestTiming& t, const TokenEvent& e, int64_t prompt_tokens,
                                  ServingClock::time_point now) {
  if (e.has_token) {
    if (t.tokens == 0) t.first_token = now;
    ++t.tokens;
    ++generated_tokens_;
  }
  if (e.finish == FinishReason::none) return;
  ++requests_;
  prompt_tokens_ += prompt_tokens;
  RequestLatency l{.ttft_s = NAN, .tpot_s = NAN};
  const bool timed = t.submitted != ServingClock::time_point{};  // submitted before monitoring began: not
  if (timed && t.tokens > 0) l.ttft_s = seconds(t.first_token - t.submitted);
  if (timed && t.tokens > 1) l.tpot_s = seconds(now - t.first_token) / double(t.tokens - 1);
  latencies_.push_back(l);
}

std::optional<WorkerServingReport> WorkerServingStats::report(int worker, const InferenceEngine& engine, bool idle,
                                                              ServingClock::time_point now) {
  ++steps_;
  if (!idle && last_report_ && now - *last_report_ < kWorkerReportGap) return std::nullopt;
  last_report_ = now;
  const KvCache& cache = engine.cache();
  WorkerServingReport r{.worker = worker,
                        .waiting = engine.waiting(),
                        .running = engine.running(),
                        .kv_blocks_used = cache.num_blocks() - cache.free_blocks(),
                        .kv_blocks_total = cache.num_blocks(),
                        .steps = steps_,
                        .requests = requests_,
                        .failed_requests = failed_,
                        .prompt_tokens = prompt_tokens_,
                        .generated_tokens = generated_tokens_,
                        .latencies = {}};
  r.latencies.swap(latencies_);
  return r;
}

ServingAggregate::ServingAggregate(int64_t replicas, double interval_s, ServingClock::time_point start)
    : replicas_(replicas), interval_s_(interval_s), workers_(size_t(std::max<int64_t>(replicas, 0))) {
  points_.push_back({start, 0, 0});
}

void ServingAggregate::apply(WorkerServingReport report, ServingClock::time_point now) {
  TROUPE_CHECK(report.worker >= 0 && size_t(report.worker) < workers_.size(), "a serving report from worker ",
               report.worker, " of a pool of ", workers_.size());
  for (const RequestLatency& l : report.latencies) {
    if (!std::isnan(l.ttft_s)) ttft_sum_s_ += l.ttft_s, ++ttft_count_;
    if (!std::isnan(l.tpot_s)) tpot_sum_s_ += l.tpot_s, ++tpot_count_;
    samples_.push_back({now, l});
  }
  while (samples_.size() > kLatencySamples) samples_.pop_front();
  report.latencies.clear();
  workers_[size_t(report.worker)] = std::move(report);
}

MonitorServing ServingAggregate::record(ServingClock::time_point now) {
  MonitorServing s;
  s.interval_s = interval_s_;
  s.replicas = replicas_;
  for (const std::optional<WorkerServingReport>& w : workers_) {
    if (!w) continue;
    s.batch_size += w->running;
    s.kv_blocks_used += w->kv_blocks_used, s.kv_blocks_total += w->kv_blocks_total;
    s.requests += w->requests, s.failed_requests += w->failed_requests;
    s.prompt_tokens += w->prompt_tokens, s.generated_tokens += w->generated_tokens, s.engine_steps += w->steps;
  }
  // The router counts a request from its submission to its end; what is not running waits
  // (in a worker's mailbox or its engine's queue). The reports may lag the router a little.
  s.queue_length = std::max<int64_t>(in_flight_ - s.batch_size, 0);

  // Rates: from the oldest point within the window (or the start) to now.
  points_.push_back({now, s.requests, s.generated_tokens});
  while (points_.size() > 2 && now - points_[1].at >= kRateWindow) points_.pop_front();
  const Point& from = points_.front();
  s.rate_window_s = seconds(now - from.at);
  if (s.rate_window_s > 0) {
    s.requests_per_second = double(s.requests - from.requests) / s.rate_window_s;
    s.tokens_per_second = double(s.generated_tokens - from.tokens) / s.rate_window_s;
  }

  while (!samples_.empty() && now - samples_.front().at > kLatencyWindow) samples_.pop_front();
  std::vector<double> ttft, tpot;
  for (const Sample& x : samples_) {
    if (!std::isnan(x.latency.ttft_s)) ttft.push_back(x.latency.ttft_s);
    if (!std::isnan(x.latency.tpot_s)) tpot.push_back(x.latency.tpot_s);
  }
  s.latency_window_s = seconds(kLatencyWindow);
  s.latency_samples = int64_t(samples_.size());
  s.ttft_p50_s = nearest_rank_quantile(ttft, 0.5), s.ttft_p99_s = nearest_rank_quantile(ttft, 0.99);
  s.tpot_p50_s = nearest_rank_quantile(tpot, 0.5), s.tpot_p99_s = nearest_rank_quantile(tpot, 0.99);
  s.ttft_sum_s = ttft_sum_s_, s.ttft_count = ttft_count_;
  s.tpot_sum_s = tpot_sum_s_, s.tpot_count = tpot_count_;
  return s;
}

}  // namespace troupe::actors
