// `troupe serve`'s numbers before they reach the monitor: a worker times each request (TTFT
// from submission to the first token, TPOT over the rest) and counts tokens, reports the
// engine's batch and KV blocks after a step but at most every kWorkerReportGap unless idle;
// the aggregate sums the workers' latest reports, derives the queue from the router's count,
// rates over its window, and nearest-rank quantiles over the recent requests.
#include <chrono>
#include <cmath>
#include <vector>

#include "actors/serve/serving_stats.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;
using test::cpu;

struct Engine {
  GptConfig config = test::tiny_inference_config(false, 32, 40, 50);
  InferenceModel model{cpu(), config, DType::f32, {.max_tokens = 64, .max_sequences = 8}};
  InferenceEngine engine{model, {.num_blocks = 12, .block_size = 4}};
  Engine() { model.load_weights(test::random_normal({model.layout().size()}, 9, 0.3f)); }
};

TokenEvent token(bool finish = false) {
  return {.request = 0,
          .has_token = true,
          .token = 1,
          .logprob = 0,
          .finish = finish ? FinishReason::length : FinishReason::none,
          .stop_text_bytes = 0};
}

TEST(ServingStats, NearestRankQuantiles) {
  std::vector<double> none;
  EXPECT_TRUE(std::isnan(nearest_rank_quantile(none, 0.5)));
  std::vector<double> v{5, 1, 4, 2, 3};
  EXPECT_EQ(nearest_rank_quantile(v, 0.5), 3);
  EXPECT_EQ(nearest_rank_quantile(v, 0.99), 5);
  EXPECT_EQ(nearest_rank_quantile(v, 0.2), 1);
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  EXPECT_EQ(nearest_rank_quantile(hundred, 0.99), 99);
  EXPECT_EQ(nearest_rank_quantile(hundred, 0.5), 50);
}

TEST(ServingStats, AWorkerTimesRequestsAndReportsItsEngine) {
  Engine e;
  WorkerServingStats stats;
  const auto t0 = ServingClock::now();
  // Request A: submitted at t0, first token at +30 ms, then 3 more by +90 ms: TPOT 20 ms.
  RequestTiming a{.submitted = t0};
  stats.on_token(a, token(), 7, t0 + 30ms);
  stats.on_token(a, token(), 7, t0 + 50ms);
  stats.on_token(a, token(), 7, t0 + 70ms);
  stats.on_token(a, token(true), 7, t0 + 90ms);
  // Request B: one token only (TTFT 10 ms, no TPOT). C: finished without a token.
  RequestTiming b{.submitted = t0 + 40ms};
  stats.on_token(b, token(true), 2, t0 + 50ms);
  RequestTiming c{.submitted = t0};
  stats.on_token(c,
                 {.request = 2,
                  .has_token = false,
                  .token = 0,
                  .logprob = 0,
                  .finish = FinishReason::cancelled,
                  .stop_text_bytes = 0},
                 3, t0 + 60ms);
  stats.on_failed();
  // A request in the engine holds blocks: prompt 5 + max_tokens 6 = 11 tokens = 3 blocks of 4.
  e.engine.add_request({test::random_token_list(5, 1, 50), {.temperature = 0.0f, .max_tokens = 6}},
                       [](const TokenEvent&) {});
  ASSERT_TRUE(e.engine.step());
  std::optional<WorkerServingReport> r = stats.report(1, e.engine, false, t0 + 100ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->worker, 1);
  EXPECT_EQ(r->running, 1);
  EXPECT_EQ(r->waiting, 0);
  EXPECT_EQ(r->kv_blocks_used, 3);
  EXPECT_EQ(r->kv_blocks_total, 12);
  EXPECT_EQ(r->steps, 1);
  EXPECT_EQ(r->requests, 3);
  EXPECT_EQ(r->failed_requests, 1);
  EXPECT_EQ(r->prompt_tokens, 12);
  EXPECT_EQ(r->generated_tokens, 5);
  ASSERT_EQ(r->latencies.size(), 3u);
  EXPECT_NEAR(r->latencies[0].ttft_s, 0.030, 1e-9);
  EXPECT_NEAR(r->latencies[0].tpot_s, 0.020, 1e-9);
  EXPECT_NEAR(r->latencies[1].ttft_s, 0.010, 1e-9);
  EXPECT_TRUE(std::isnan(r->latencies[1].tpot_s));
  EXPECT_TRUE(std::isnan(r->latencies[2].ttft_s));
  // Busy and within the gap: no report; idle: a report at once; the latencies went with the first.
  EXPECT_FALSE(stats.report(1, e.engine, false, t0 + 100ms + kWorkerReportGap / 2));
  r = stats.report(1, e.engine, true, t0 + 100ms + kWorkerReportGap / 2);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->steps, 3);
  EXPECT_TRUE(r->latencies.empty());
  EXPECT_TRUE(stats.report(1, e.engine, false, t0 + 100ms + kWorkerReportGap * 2));
}

WorkerServingReport report(int worker, int64_t running, int64_t requests, int64_t tokens,
                           std::vector<RequestLatency> latencies = {}) {
  return {.worker = worker,
          .waiting = 0,
          .running = running,
          .kv_blocks_used = 10 * running,
          .kv_blocks_total = 100,
          .steps = tokens,
          .requests = requests,
          .failed_requests = 0,
          .prompt_tokens = 3 * requests,
          .generated_tokens = tokens,
          .latencies = std::move(latencies)};
}

TEST(ServingStats, TheAggregateSumsTheLatestReportsOfEachWorker) {
  const auto t0 = ServingClock::now();
  ServingAggregate all(2, 0.5, t0);
  MonitorServing s = all.record(t0 + 1s);  // nothing reported yet
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.requests, 0);
  EXPECT_TRUE(std::isnan(s.ttft_p50_s));
  all.apply(report(0, 2, 4, 40, {{0.1, 0.01}, {0.2, 0.02}}), t0 + 1s);
  all.apply(report(1, 1, 1, 10, {{0.3, NAN}}), t0 + 1s);
  all.apply(report(0, 3, 5, 50, {{0.4, 0.04}}), t0 + 2s);  // replaces worker 0's counts
  all.set_in_flight(7);
  s = all.record(t0 + 2s);
  EXPECT_EQ(s.batch_size, 4);
  EXPECT_EQ(s.queue_length, 3);  // 7 in flight, 4 running
  EXPECT_EQ(s.kv_blocks_used, 40);
  EXPECT_EQ(s.kv_blocks_total, 200);
  EXPECT_EQ(s.requests, 6);
  EXPECT_EQ(s.prompt_tokens, 18);
  EXPECT_EQ(s.generated_tokens, 60);
  EXPECT_DOUBLE_EQ(s.rate_window_s, 2.0);
  EXPECT_DOUBLE_EQ(s.requests_per_second, 3.0);
  EXPECT_DOUBLE_EQ(s.tokens_per_second, 30.0);
  EXPECT_EQ(s.latency_samples, 4);
  EXPECT_EQ(s.ttft_count, 4);
  EXPECT_NEAR(s.ttft_sum_s, 1.0, 1e-12);
  EXPECT_EQ(s.tpot_count, 3);
  EXPECT_NEAR(s.tpot_sum_s, 0.07, 1e-12);
  EXPECT_DOUBLE_EQ(s.ttft_p50_s, 0.2);
  EXPECT_DOUBLE_EQ(s.ttft_p99_s, 0.4);
  EXPECT_DOUBLE_EQ(s.tpot_p50_s, 0.02);
  all.set_in_flight(2);  // the reports lag the router: the queue is never negative
  EXPECT_EQ(all.record(t0 + 3s).queue_length, 0);
  // Past the windows: rates from the last point before now - 10 s, quantiles of nothing, sums kept.
  s = all.record(t0 + 2s + ServingAggregate::kLatencyWindow + 1s);
  EXPECT_EQ(s.latency_samples, 0);
  EXPECT_TRUE(std::isnan(s.ttft_p99_s));
  EXPECT_EQ(s.ttft_count, 4);
  EXPECT_DOUBLE_EQ(s.requests_per_second, 0.0);
  EXPECT_THROW(all.apply(report(2, 0, 0, 0), t0), Error);
}

}  // namespace
}  // namespace troupe::actors
