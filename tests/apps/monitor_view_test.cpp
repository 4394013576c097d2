// What `troupe monitor` makes of the messages it receives: lost messages counted from gaps in
// `seq` (repeats never count), a new run on the same endpoint starting afresh, the loss history
// filled from repeats, progress and ETA, the values in the log line's own formats, the chart,
// the stages' time, and the --once JSON.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

#include "apps/monitor/monitor_view.hpp"
#include "apps/train/train_log.hpp"
#include "apps/train/train_monitor.hpp"
#include "tests/test_util.hpp"

namespace troupe::apps {
namespace {

using actors::MonitorEnd;
using actors::MonitorHello;
using actors::MonitorIteration;
using actors::MonitorMessage;
using actors::MonitorValidation;

MonitorHello hello(const std::string& run_id) {
  MonitorHello h;
  h.run_id = run_id;
  h.model = "gpt2-tiny";
  h.train_iters = 1000, h.log_interval = 10, h.device_count = 2, h.device_kind = "cpu", h.dtype = "f32";
  return h;
}

MonitorIteration iteration(int64_t i, double loss) {
  LogWindow w{.iteration = i,
              .train_iters = 1000,
              .consumed_samples = i * 8,
              .global_batch_size = 8,
              .ms_per_iteration = 250,
              .tflops_per_device = 1.25,
              .lr = 6e-4,
              .loss = loss,
              .loss_scale = 1,
              .grad_norm = 0.5,
              .skipped = 0,
              .nan = 0,
              .iterations = 10};
  return monitor_iteration(w, 8 * 128, 0, {});
}

MonitorMessage fresh(uint64_t seq, actors::MonitorBody body) {
  return {.seq = seq, .unix_ms = 0, .body = std::move(body)};
}
MonitorMessage repeat(uint64_t seq, actors::MonitorBody body) {
  return {.seq = seq, .repeat = true, .unix_ms = 0, .body = std::move(body)};
}

TEST(MonitorView, GapsInFreshMessagesCountAsMissedRepeatsDoNot) {
  MonitorView v;
  EXPECT_TRUE(v.apply(repeat(1, hello("a"))));  // attached late: the snapshot first
  EXPECT_TRUE(v.apply(repeat(40, iteration(400, 3.0))));
  EXPECT_TRUE(v.complete());
  EXPECT_TRUE(v.apply(fresh(41, iteration(410, 2.9))));
  EXPECT_TRUE(v.apply(fresh(44, iteration(440, 2.8))));  // 42 and 43 were dropped for us
  EXPECT_EQ(v.missed, 2u);
  EXPECT_FALSE(v.apply(repeat(1, hello("a"))));  // the heartbeat changes nothing
  EXPECT_FALSE(v.apply(repeat(44, iteration(440, 2.8))));
  EXPECT_EQ(v.missed, 2u);
  EXPECT_EQ(v.iteration->iteration, 440);
  EXPECT_EQ(v.losses.size(), 3u);
}

TEST(MonitorView, OlderRepeatsFillTheHistoryButNotTheLatest) {
  MonitorView v;
  v.apply(fresh(1, hello("a")));
  v.apply(fresh(2, iteration(90, 5.0)));
  EXPECT_TRUE(v.apply(repeat(1, iteration(30, 7.0))));  // history sent to a new subscriber
  EXPECT_EQ(v.iteration->iteration, 90);
  EXPECT_EQ(v.losses.size(), 2u);
  EXPECT_EQ(v.losses.begin()->first, 30);
  for (int i = 0; i < int(MonitorView::kHistory) + 5; ++i) v.apply(fresh(3 + uint64_t(i), iteration(100 + i, 1.0)));
  EXPECT_EQ(v.losses.size(), MonitorView::kHistory);
  EXPECT_EQ(v.missed, 0u);
}

TEST(MonitorView, AnotherRunOnTheEndpointStartsAfresh) {
  MonitorView v;
  v.apply(fresh(1, hello("a")));
  v.apply(fresh(2, iteration(10, 5.0)));
  v.apply(fresh(3, MonitorEnd{.iteration = 10, .reason = "stopped", .detail = "stopped by signal 2"}));
  ASSERT_TRUE(v.end);
  EXPECT_TRUE(v.apply(fresh(1, hello("b"))));
  EXPECT_FALSE(v.end);
  EXPECT_FALSE(v.iteration);
  EXPECT_TRUE(v.losses.empty());
  EXPECT_EQ(v.hello->run_id, "b");
  EXPECT_EQ(v.missed, 0u);
}

TEST(MonitorView, ProgressEtaAndDurations) {
  MonitorView v;
  EXPECT_TRUE(std::isnan(v.progress()));
  v.apply(fresh(1, hello("a")));
  v.apply(fresh(2, iteration(250, 4.0)));  // 750 left at 250 ms
  EXPECT_DOUBLE_EQ(v.progress(), 0.25);
  EXPECT_DOUBLE_EQ(v.eta_seconds(), 187.5);
  EXPECT_EQ(format_duration(187.5), "3m08s");
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(3 * 3600 + 125), "3h02m");
  EXPECT_EQ(format_duration(8 * 86400 + 5 * 3600), "8d05h");
  EXPECT_EQ(format_duration(NAN), "?");
}

TEST(MonitorView, ValuesReadAsInTheLogLine) {
  LogWindow w{.iteration = 20,
              .train_iters = 100,
              .consumed_samples = 160,
              .global_batch_size = 8,
              .ms_per_iteration = 123.456,
              .tflops_per_device = 98.765,
              .lr = 5.99e-4,
              .loss = 3.2109876543,
              .loss_scale = 65536,
              .grad_norm = 1.23456,
              .skipped = 1,
              .nan = 0,
              .iterations = 10};
  const std::string log = iteration_line(w);
  const std::string shown = format_values(monitor_iteration(w, 1024, 0, {}));
  for (const char* field : {"lm loss: ", "learning rate: ", "grad norm: ", "loss scale: ",
                            "elapsed time per iteration (ms): ", "throughput per GPU (TFLOP/s/GPU): "}) {
    // "<label><value> |" in both, with the same characters.
    const auto value_after = [&](const std::string& text) {
      const size_t at = text.find(field);
      EXPECT_NE(at, std::string::npos) << field << " in " << text;
      const size_t start = at + std::strlen(field);
      return text.substr(start, text.find_first_of(" |\n", start) - start);
    };
    EXPECT_EQ(value_after(shown), value_after(log)) << field;
  }
  EXPECT_NE(shown.find("tokens/s: 8294"), std::string::npos) << shown;  // 1024 tokens / 0.123456 s
  EXPECT_NE(shown.find("MFU: n/a"), std::string::npos) << shown;
  EXPECT_EQ(shown.find("straggler"), std::string::npos) << shown;
}

TEST(MonitorView, TheStragglerReportShowsALineADeviceAsInTheLog) {
  LogWindow w{.iteration = 20, .train_iters = 100, .iterations = 10};
  w.stragglers = {"straggler: device 3 (stage 1, data rank 1) 2.4x the median busy time of its 3 peers",
                  "straggler: device 6 (stage 1, data rank 2) 1.6x the median busy time of its 3 peers"};
  w.straggler_devices = {3, 6};
  const MonitorIteration it = monitor_iteration(w, 1024, 0, {});
  EXPECT_EQ(it.straggler_devices, (std::vector<int64_t>{3, 6}));
  const std::string shown = format_values(it);
  EXPECT_NE(shown.find("\n" + w.stragglers[0] + "\n" + w.stragglers[1] + "\n"), std::string::npos) << shown;
}

TEST(MonitorView, TheRouterNumbersReadAsInTheLogLine) {
  LogWindow w{.iteration = 20, .train_iters = 100, .iterations = 10};
  w.load_balancing_loss = 1.0123456;
  w.expert_load = {{.layer = 1, .tokens_max = 40, .tokens_mean = 32.0},
                   {.layer = 3, .tokens_max = 37, .tokens_mean = 31.5}};
  const std::string log = iteration_line(w);
  const MonitorIteration it = monitor_iteration(w, 1024, 0, {});
  EXPECT_EQ(it.moe_layers, (std::vector<int64_t>{1, 3}));
  const std::string shown = format_values(it);
  for (const char* part : {"load_balancing_loss: 1.012346E+00", "expert load max/mean: 1: 40/32.0 3: 37/31.5"}) {
    EXPECT_NE(log.find(part), std::string::npos) << part << " in " << log;
    EXPECT_NE(shown.find(part), std::string::npos) << part << " in " << shown;
  }
  EXPECT_EQ(shown.find("z_loss"), std::string::npos) << shown;
}

TEST(MonitorView, LossChartPutsTheMaximumOnTopAndTheMinimumAtTheBottom) {
  std::map<int64_t, double> losses{{10, 8.0}, {20, 6.0}, {30, 4.0}, {40, NAN}, {50, 2.0}};
  const std::string chart = loss_chart(losses, 60, 4);
  std::printf("%s", chart.c_str());
  std::vector<std::string> rows;
  for (size_t start = 0, nl; (nl = chart.find('\n', start)) != std::string::npos; start = nl + 1)
    rows.push_back(chart.substr(start, nl - start));
  ASSERT_EQ(rows.size(), 6u);  // 4 rows, the axis, the iteration labels
  EXPECT_EQ(rows[0], "   8.0000 |*");
  EXPECT_EQ(rows[3], "   2.0000 |   *");
  EXPECT_EQ(rows[4], "          +----");
  EXPECT_NE(rows[5].find("10"), std::string::npos);
  EXPECT_NE(rows[5].find("50"), std::string::npos);
  EXPECT_EQ(loss_chart({}, 60, 4), "");
  // Only the newest `width` points.
  std::map<int64_t, double> many;
  for (int i = 0; i < 100; ++i) many[i] = double(i % 7);
  EXPECT_EQ(loss_chart(many, 30, 4).find("+" + std::string(30, '-') + "\n") != std::string::npos, true);
}

TEST(MonitorView, TerminalViewFitsTheWidth) {
  MonitorView v;
  EXPECT_NE(render_terminal(v, "tcp://h:1", 80, 0).find("waiting for the run"), std::string::npos);
  v.apply(fresh(1, hello("a-very-long-run-id-that-goes-on-and-on-and-on-and-on-and-on-and-on-and-on")));
  for (int i = 1; i <= 30; ++i) v.apply(fresh(1 + uint64_t(i), iteration(i * 10, 8.0 / i)));
  v.apply(fresh(32, MonitorValidation{.iteration = 300, .lm_loss = 1.5, .ppl = std::exp(1.5)}));
  const std::string text = render_terminal(v, "tcp://127.0.0.1:5555", 80, 0.5);
  std::printf("%s", text.c_str());
  for (size_t start = 0, nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    EXPECT_LE(nl - start, 80u) << text.substr(start, nl - start);
  EXPECT_NE(text.find("iteration      300/    1000"), std::string::npos);
  EXPECT_NE(text.find("ETA 2m55s"), std::string::npos);
  EXPECT_NE(text.find("validation at 300: lm loss value: 1.500000E+00 | lm loss PPL: 4.481689E+00\n"),
            std::string::npos);
  EXPECT_NE(text.find("messages missed: 0"), std::string::npos);
  // An 80-column terminal shows every value whole.
  EXPECT_NE(text.find("throughput per GPU (TFLOP/s/GPU): 1.2 | MFU: n/a\n"), std::string::npos);
}

TEST(MonitorView, OnceJsonHasEveryRecordAndNullForUnknowns) {
  MonitorView v;
  v.apply(fresh(1, hello("a")));
  v.apply(fresh(2, iteration(100, 3.5)));
  const nlohmann::json j = nlohmann::json::parse(snapshot_json(v, "tcp://127.0.0.1:5555"));
  EXPECT_EQ(j["endpoint"], "tcp://127.0.0.1:5555");
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["hello"]["run_id"], "a");
  EXPECT_EQ(j["iteration"]["iteration"], 100);
  EXPECT_EQ(j["iteration"]["lm_loss"], 3.5);
  EXPECT_TRUE(j["iteration"]["mfu"].is_null());  // no peak given: NaN -> null
  EXPECT_TRUE(j["iteration"]["memory_bytes"].is_array());
  EXPECT_TRUE(j["validation"].is_null());
  EXPECT_TRUE(j["end"].is_null());
  EXPECT_DOUBLE_EQ(j["progress"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(j["eta_seconds"].get<double>(), 225.0);
  EXPECT_EQ(j["missed_messages"], 0);
  EXPECT_TRUE(j["stages"].is_null());
  EXPECT_EQ(j["trace_events"], 0);
}

actors::MonitorStages stages(int64_t i) {
  // Stage 0: 60% busy, 10% communication, 30% idle; stage 1: 25% busy, 5% data, 70% idle.
  actors::MonitorStages s;
  s.iteration = i, s.start_ns = 1000, s.end_ns = 1000 + 10000000;
  s.busy_ns = {6000000, 2500000}, s.communication_ns = {1000000, 0}, s.data_ns = {0, 500000};
  s.checkpoint_ns = {0, 0}, s.optimizer_ns = {0, 0}, s.idle_ns = {3000000, 7000000};
  return s;
}

TEST(MonitorView, StagesShowTheirSharesInTheViewTheLineAndTheJson) {
  MonitorView v;
  v.apply(fresh(1, hello("a")));
  v.apply(fresh(2, stages(100)));
  v.apply(repeat(2, stages(90)));  // an older one re-sent: not the latest
  actors::MonitorTrace t;
  t.iteration = 100, t.dropped_events = 3;
  t.events.resize(5);
  v.apply(fresh(3, t));
  v.apply(repeat(3, t));  // counted once
  const MonitorMessage it = fresh(4, iteration(100, 3.5));
  v.apply(it);
  const std::string text = render_terminal(v, "tcp://h:1", 100, 0);
  EXPECT_NE(text.find("stage time at iteration 100 (10.0 ms):"), std::string::npos) << text;
  EXPECT_NE(text.find("  60.0%  10.0%   0.0%   0.0%   0.0%  30.0%\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  25.0%   0.0%   5.0%   0.0%   0.0%  70.0%\n"), std::string::npos) << text;
  EXPECT_NE(text.find("trace events: 5 (the run dropped 3)"), std::string::npos) << text;
  const std::string line = render_line(v, it);
  EXPECT_NE(line.find("| stages busy: 60% 25%"), std::string::npos) << line;
  EXPECT_EQ(render_line(v, fresh(3, t)), "");
  const nlohmann::json j = nlohmann::json::parse(snapshot_json(v, "tcp://h:1"));
  EXPECT_EQ(j["stages"]["iteration"], 100);
  EXPECT_EQ(j["stages"]["idle_ns"][1], 7000000);
  EXPECT_EQ(j["trace_events"], 5);
  EXPECT_EQ(j["dropped_trace_events"], 3);
}

actors::MonitorServing serving(int64_t requests) {
  actors::MonitorServing s;
  s.replicas = 2, s.queue_length = 3, s.batch_size = 5, s.kv_blocks_used = 40, s.kv_blocks_total = 512;
  s.requests = requests, s.failed_requests = 1, s.prompt_tokens = 900, s.generated_tokens = 4000, s.engine_steps = 700;
  s.rate_window_s = 10, s.requests_per_second = 2.5, s.tokens_per_second = 123.4, s.latency_window_s = 60;
  s.latency_samples = 25, s.ttft_p50_s = 0.0123, s.ttft_p99_s = 0.25, s.tpot_p50_s = 0.004, s.tpot_p99_s = NAN;
  return s;
}

TEST(MonitorView, AServerShowsItsServingStateNotTraining) {
  MonitorView v;
  MonitorHello h = hello("s");
  h.kind = "serve", h.replicas = 2, h.model = "/models/gpt2";
  v.apply(fresh(1, h));
  EXPECT_FALSE(v.complete());
  std::string text = render_terminal(v, "tcp://h:1", 120, 0);
  EXPECT_NE(text.find("waiting for the first serving record"), std::string::npos) << text;
  v.apply(fresh(5, serving(30)));
  v.apply(repeat(4, serving(20)));  // an older record re-sent: not the latest
  EXPECT_TRUE(v.complete());
  text = render_terminal(v, "tcp://h:1", 120, 0);
  EXPECT_NE(text.find("serving /models/gpt2"), std::string::npos) << text;
  EXPECT_NE(text.find("2 replicas on 2 cpu devices (f32)"), std::string::npos) << text;
  EXPECT_NE(text.find("requests/s: 2.50 | tokens/s: 123.4 (over 10 s) | queue: 3 | batch: 5 | KV blocks: 40/512"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("requests: 30 (failed 1) | prompt tokens: 900 | generated tokens: 4000"), std::string::npos)
      << text;
  EXPECT_NE(text.find("TTFT ms p50: 12.3 p99: 250.0 | TPOT ms p50: 4.0 p99: n/a (25 requests of the last 60 s)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("iteration"), std::string::npos) << text;
  EXPECT_EQ(render_line(v, fresh(5, serving(30))).rfind("serving | requests/s: 2.50 | ", 0), 0u);
  v.apply(fresh(6, actors::MonitorEnd{.iteration = 0, .reason = "stopped", .detail = "stopped by signal 15"}));
  EXPECT_NE(render_terminal(v, "tcp://h:1", 120, 0).find("server ended: stopped: stopped by signal 15"),
            std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(snapshot_json(v, "tcp://h:1"));
  EXPECT_EQ(j["hello"]["kind"], "serve");
  EXPECT_EQ(j["serving"]["requests"], 30);
  EXPECT_TRUE(j["serving"]["tpot_p99_s"].is_null());
  EXPECT_TRUE(j["iteration"].is_null());
}

}  // namespace
}  // namespace troupe::apps
