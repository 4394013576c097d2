// The numbers `troupe serve` reports to its monitor, without CAF: each inference worker counts
// its requests and tokens and times each request (WorkerServingStats), and hands a report
// after an engine step, at most every kWorkerReportGap (and whenever its engine goes idle, so
// the last state always arrives); the serving monitor combines the workers' latest reports and
// the router's count of requests in flight into one `serving` record (ServingAggregate).
// Reports carry counts since the start, not increments, so a report lost or late costs
// freshness, never a count.
//
//   WorkerServingStats stats;                          // the worker's
//   stats.on_token(timing, event, prompt_tokens, now); // in the request's token callback
//   if (auto r = stats.report(worker, engine, idle, now)) send(reporter, *r);
//   ServingAggregate all(replicas, start);             // the serving monitor's
//   all.apply(*r);  MonitorServing record = all.record(now);
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "actors/monitor/monitor_schema.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::actors {

using ServingClock = std::chrono::steady_clock;

// Reports of one worker come at most this often while it is busy.
inline constexpr std::chrono::milliseconds kWorkerReportGap{100};

// One request's times, kept with the request by its worker.
struct RequestTiming {
  ServingClock::time_point submitted{};    // handed to the pool (InferencePool::submit)
  ServingClock::time_point first_token{};  // its first generated token
  int64_t tokens = 0;                      // generated so far
};

// One finished request's latencies, seconds; NaN where it has none (no token; one token: no TPOT).
struct RequestLatency {
  double ttft_s = 0, tpot_s = 0;
};

// A worker's state after an engine step, and its counts since it started.
struct WorkerServingReport {
  int worker = 0;
  int64_t waiting = 0, running = 0, kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t steps = 0, requests = 0, failed_requests = 0, prompt_tokens = 0, generated_tokens = 0;
  std::vector<RequestLatency> latencies;  // of the requests finished since the previous report
};

class WorkerServingStats {
 public:
  // A token event of a request whose prompt has `prompt_tokens` tokens.
  void on_token(RequestTiming& t, const TokenEvent& e, int64_t prompt_tokens, ServingClock::time_point now);
  // A request that ended with an error instead of tokens.
  void on_failed() { ++failed_; }
  // After an engine step (`idle`: the engine has nothing left): the report to send, or
  // nullopt when the previous one was sent less than kWorkerReportGap ago and the worker is busy.
  std::optional<WorkerServingReport> report(int worker, const InferenceEngine& engine, bool idle,
                                            ServingClock::time_point now);

 private:
  int64_t steps_ = 0, requests_ = 0, failed_ = 0, prompt_tokens_ = 0, generated_tokens_ = 0;
  std::vector<RequestLatency> latencies_;  // since the last report
  std::optional<ServingClock::time_point> last_report_;
};

class ServingAggregate {
 public:
  // Rates over this window, quantiles over requests finished within this window ...
  static constexpr std::chrono::seconds kRateWindow{10}, kLatencyWindow{60};
  // ... and at most this many of them (the newest).
  static constexpr size_t kLatencySamples = 4096;

  ServingAggregate(int64_t replicas, double interval_s, ServingClock::time_point start);

  void apply(WorkerServingReport report, ServingClock::time_point now);
  // The router's requests in flight (submitted, not finished).
  void set_in_flight(int64_t requests) { in_flight_ = requests; }
  // The `serving` record as of `now`.
  MonitorServing record(ServingClock::time_point now);

 private:
  struct Point {  // counts at a time, for the rates
    ServingClock::time_point at;
    int64_t requests, tokens;
  };
  struct Sample {
    ServingClock::time_point at;
    RequestLatency latency;
  };

  int64_t replicas_;
  double interval_s_;
  int64_t in_flight_ = 0;
  std::vector<std::optional<WorkerServingReport>> workers_;  // the latest report of each (latencies taken out)
  std::deque<Point> points_;
  std::deque<Sample> samples_;
  double ttft_sum_s_ = 0, tpot_sum_s_ = 0;
  int64_t ttft_count_ = 0, tpot_count_ = 0;
};

// The q-quantile (0 < q <= 1) of `values` by nearest rank; NaN when empty. Reorders `values`.
double nearest_rank_quantile(std::vector<double>& values, double q);

}  // namespace troupe::actors
