// The monitor's transports, without a training run: the ZeroMQ publisher and subscriber (a
// message goes through; a subscriber that stops reading costs the publisher nothing and sees
// the loss as gaps in `seq`; a taken port is an error naming the endpoint), and the metrics
// HTTP server with the Prometheus text it serves (checked line by line against the format).
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>
#include <thread>

#include "actors/monitor/metrics_http_server.hpp"
#include "actors/monitor/monitor_metrics.hpp"
#include "actors/monitor/monitor_publisher.hpp"
#include "actors/monitor/monitor_subscriber.hpp"
#include "actors/monitor/trace_forwarding.hpp"
#include "tests/http_client.hpp"
#include "tests/test_util.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;
using test::http_get;

// Waits until the publisher has seen `sub` subscribe, so what it sends next reaches it.
void await_subscription(MonitorPublisher& pub) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (pub.take_new_subscriptions() == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the subscription never reached the publisher";
    std::this_thread::sleep_for(5ms);
  }
}

MonitorIteration iteration_record(int64_t iteration, double loss) {
  MonitorIteration it;
  it.iteration = iteration, it.train_iters = 1000, it.consumed_samples = iteration * 8, it.window_iterations = 10;
  it.lm_loss = loss, it.learning_rate = 3e-4, it.grad_norm = 0.75, it.loss_scale = 1;
  it.elapsed_ms_per_iteration = 125.5, it.tokens_per_second = 8160.0, it.tflops_per_device = 12.25;
  it.mfu = NAN;
  return it;
}

TEST(MonitorTransport, PublishedMessagesReachASubscriber) {
  MonitorPublisher pub("tcp://127.0.0.1:*", 16);
  ASSERT_EQ(pub.endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << pub.endpoint();
  EXPECT_EQ(pub.endpoint().find('*'), std::string::npos) << "the wildcard port was not resolved";
  MonitorSubscriber sub(pub.endpoint().substr(6));  // "127.0.0.1:PORT": tcp:// is implied
  EXPECT_EQ(sub.endpoint(), pub.endpoint());
  await_subscription(pub);
  ASSERT_TRUE(pub.send(monitor_encode({.seq = 1, .unix_ms = 5, .body = iteration_record(10, 4.5)})));
  const std::optional<MonitorMessage> m = sub.receive(5s);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->seq, 1u);
  ASSERT_TRUE(std::holds_alternative<MonitorIteration>(m->body));
  EXPECT_EQ(std::get<MonitorIteration>(m->body).iteration, 10);
  EXPECT_EQ(std::get<MonitorIteration>(m->body).lm_loss, 4.5);
  EXPECT_FALSE(sub.receive(50ms).has_value()) << "one message sent, two received";
  EXPECT_EQ(pub.sent(), 1u);
  EXPECT_EQ(pub.refused(), 0u);
}

// A newer run's message type is skipped (counted), and the next known message still arrives.
TEST(MonitorTransport, UnknownMessageTypesAreSkipped) {
  MonitorPublisher pub("tcp://127.0.0.1:*", 16);
  MonitorSubscriber sub(pub.endpoint());
  await_subscription(pub);
  std::string unknown =
      monitor_encode({.seq = 1, .body = MonitorEnd{.iteration = 5, .reason = "completed", .detail = ""}});
  const std::string from(
      "\xa3"
      "end",
      4),
      to("\xa3"
         "eNd",
         4);  // a type version 1 does not have
  const size_t at = unknown.find(from);
  ASSERT_NE(at, std::string::npos);
  unknown.replace(at, from.size(), to);
  ASSERT_TRUE(pub.send(unknown));
  ASSERT_TRUE(pub.send(monitor_encode({.seq = 2, .body = iteration_record(11, 3.5)})));
  const std::optional<MonitorMessage> m = sub.receive(5s);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->seq, 2u);
  EXPECT_TRUE(std::holds_alternative<MonitorIteration>(m->body));
  EXPECT_EQ(sub.skipped(), 1);
}

TEST(MonitorTransport, AStalledSubscriberNeverBlocksThePublisher) {
  MonitorPublisher pub("tcp://127.0.0.1:*", 16);
  MonitorSubscriber sub(pub.endpoint());
  await_subscription(pub);
  // 100 MB for a subscriber that reads nothing meanwhile: far more than ZeroMQ's queues and the
  // kernel's socket buffers hold, so the publisher must drop, and must not wait.
  const int n = 100000;
  const std::string pad(1000, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= n; ++i) {
    MonitorEnd body{.iteration = i, .reason = "padding", .detail = pad};
    pub.send(monitor_encode({.seq = uint64_t(i), .unix_ms = 0, .body = body}));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 10.0) << "sending blocked on the stalled subscriber";
  std::printf("%d sends in %.3f s (%.1f us each); ZeroMQ accepted %lu, refused %lu\n", n, seconds, seconds / n * 1e6,
              static_cast<unsigned long>(pub.sent()), static_cast<unsigned long>(pub.refused()));
  // What reached the subscriber: in order, with gaps where messages were dropped for it.
  uint64_t received = 0, last = 0, gaps = 0;
  while (std::optional<MonitorMessage> m = sub.receive(500ms)) {
    EXPECT_GT(m->seq, last);
    gaps += m->seq > last + 1 ? 1 : 0;
    last = m->seq;
    ++received;
  }
  std::printf("the subscriber received %lu of %d (%lu gaps)\n", static_cast<unsigned long>(received), n,
              static_cast<unsigned long>(gaps));
  EXPECT_GT(received, 0u);
  EXPECT_LT(received, uint64_t(n));
  EXPECT_GT(gaps, 0u);
}

TEST(MonitorTransport, ATakenEndpointIsAnErrorNamingIt) {
  MonitorPublisher first("tcp://127.0.0.1:*", 16);
  try {
    MonitorPublisher second(first.endpoint(), 16);
    FAIL() << "bound " << first.endpoint() << " twice";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot bind the monitor's ZeroMQ socket to " + first.endpoint()), std::string::npos) << what;
    EXPECT_NE(what.find("--monitor-endpoint"), std::string::npos) << what;
  }
  EXPECT_THROW(MonitorPublisher("nonsense://x", 16), Error);
}

// Every line of a Prometheus text exposition: "# HELP name text", "# TYPE name type" (before the
// family's samples, once each), or a sample "name{labels} value" with a number as value.
void expect_prometheus_format(const std::string& text) {
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  std::set<std::string> helped, typed;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, rest;
      words >> name >> rest;
      EXPECT_FALSE(rest.empty()) << line;
      auto& seen = line[2] == 'H' ? helped : typed;
      EXPECT_TRUE(seen.insert(name).second) << "twice: " << line;
      if (line[2] == 'T') {
        EXPECT_TRUE(rest == "gauge" || rest == "counter") << line;
      }
      continue;
    }
    const size_t name_end = line.find_first_of("{ ");
    ASSERT_NE(name_end, std::string::npos) << line;
    const std::string name = line.substr(0, name_end);
    EXPECT_EQ(name.rfind("troupe_", 0), 0u) << line;
    EXPECT_TRUE(helped.count(name) && typed.count(name)) << "sample before its HELP/TYPE: " << line;
    const size_t value_at = line.rfind(' ');
    const std::string value = line.substr(value_at + 1);
    if (value != "NaN" && value != "+Inf" && value != "-Inf") {
      size_t used = 0;
      EXPECT_NO_THROW((void)std::stod(value, &used)) << line;
      EXPECT_EQ(used, value.size()) << line;
    }
    if (line[name_end] == '{') {
      EXPECT_EQ(line[value_at - 1], '}') << line;
    }
  }
}

MonitorHello hello_record() {
  MonitorHello h;
  h.run_id = "host-1-2";
  h.model = "gpt2 \"tiny\"";  // a quote to escape
  h.device_kind = "cuda", h.dtype = "bf16", h.schedule = "1f1b";
  h.train_iters = 1000, h.global_batch_size = 8, h.parameters = 123456;
  return h;
}

TEST(MonitorMetrics, PrometheusTextHasTheLatestValues) {
  MonitorMetrics metrics;
  EXPECT_NE(metrics.prometheus_text().find("troupe_run_ended 0\n"), std::string::npos);
  metrics.update({.seq = 1, .unix_ms = 1000, .body = hello_record()});
  MonitorIteration it = iteration_record(20, 3.25);
  it.skipped_iterations = 2;
  it.memory_bytes = {1000, 2000};
  metrics.update({.seq = 2, .unix_ms = 2000, .body = it});
  it.iteration = 30, it.lm_loss = 3.125, it.mfu = 0.5;
  metrics.update({.seq = 3, .unix_ms = 3000, .body = it});
  metrics.update({.seq = 3, .repeat = true, .unix_ms = 3000, .body = it});  // a repeat counts nothing twice
  metrics.update({.seq = 4, .unix_ms = 3500, .body = MonitorValidation{.iteration = 30, .lm_loss = 3.5, .ppl = 33.0}});
  metrics.set_publisher_counts(7, 1, 2);
  const std::string text = metrics.prometheus_text();
  std::printf("%s", text.c_str());
  expect_prometheus_format(text);
  for (const char* want :
       {"# TYPE troupe_lm_loss gauge\ntroupe_lm_loss 3.125\n", "troupe_iteration 30\n", "troupe_learning_rate 3e-04\n",
        "troupe_grad_norm 0.75\n", "troupe_iteration_time_seconds 0.1255\n", "troupe_tokens_per_second 8160\n",
        "troupe_mfu 0.5\n", "# TYPE troupe_skipped_iterations_total counter\ntroupe_skipped_iterations_total 4\n",
        "troupe_device_memory_bytes{device=\"0\"} 1000\ntroupe_device_memory_bytes{device=\"1\"} 2000\n",
        "troupe_validation_ppl 33\n", "troupe_train_iters 1000\n", "model=\"gpt2 \\\"tiny\\\"\"",
        "troupe_monitor_messages_sent_total 7\n", "troupe_last_log_time_seconds 3\n"})
    EXPECT_NE(text.find(want), std::string::npos) << "missing: " << want;
  EXPECT_NE(metrics.health_json().find("\"status\": \"training\""), std::string::npos);
  metrics.update({.seq = 5, .unix_ms = 4000, .body = MonitorEnd{.iteration = 30, .reason = "completed", .detail = ""}});
  EXPECT_NE(metrics.prometheus_text().find("troupe_run_ended 1\n"), std::string::npos);
  EXPECT_NE(metrics.health_json().find("\"reason\": \"completed\""), std::string::npos);
}

TEST(MonitorMetrics, MixtureOfExpertsGaugesPerLayer) {
  MonitorMetrics metrics;
  MonitorIteration it = iteration_record(10, 3.0);
  metrics.update({.seq = 1, .unix_ms = 0, .body = it});
  EXPECT_EQ(metrics.prometheus_text().find("troupe_moe"), std::string::npos);  // a dense model has none
  it.load_balancing_loss = 1.0625;                                             // and no z-loss (NaN)
  it.moe_layers = {0, 2}, it.expert_load_max = {40, 36}, it.expert_load_mean = {32.0, 32.5};
  metrics.update({.seq = 2, .unix_ms = 0, .body = it});
  const std::string text = metrics.prometheus_text();
  expect_prometheus_format(text);
  for (const char* want : {"troupe_moe_load_balancing_loss 1.0625\n",
                           "troupe_moe_expert_load_max{layer=\"0\"} 40\ntroupe_moe_expert_load_max{layer=\"2\"} 36\n",
                           "troupe_moe_expert_load_mean{layer=\"2\"} 32.5\n"})
    EXPECT_NE(text.find(want), std::string::npos) << "missing: " << want << "\n" << text;
  EXPECT_EQ(text.find("troupe_moe_z_loss"), std::string::npos);
}

TEST(MonitorMetrics, UnknownMfuIsLeftOutAndNumbersRoundTrip) {
  MonitorMetrics metrics;
  metrics.update({.seq = 1, .unix_ms = 0, .body = iteration_record(1, 1.0 / 3.0)});  // mfu NaN
  const std::string text = metrics.prometheus_text();
  EXPECT_EQ(text.find("troupe_mfu"), std::string::npos);
  expect_prometheus_format(text);
  EXPECT_EQ(std::stod(prometheus_number(1.0 / 3.0)), 1.0 / 3.0);
  EXPECT_EQ(prometheus_number(NAN), "NaN");
  EXPECT_EQ(prometheus_number(-INFINITY), "-Inf");
  EXPECT_EQ(prometheus_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST(TraceQueue, BoundsTheEventsInFlightAndCountsDrops) {
  TraceQueue q(10);
  EXPECT_TRUE(q.try_push(6));
  EXPECT_FALSE(q.try_push(5));  // 11 > 10: the whole batch is dropped, and counted
  EXPECT_EQ(q.dropped(), 5);
  EXPECT_TRUE(q.try_push(4));  // exactly full
  EXPECT_FALSE(q.try_push(1));
  q.pop(6);  // the monitor took the first batch
  EXPECT_TRUE(q.try_push(6));
  EXPECT_EQ(q.dropped(), 6);
}

TEST(MetricsHttpServer, ServesItsRoutesOnlyAndExactly) {
  MetricsHttpServer http(
      "127.0.0.1", 0,
      {{"/metrics", "text/plain; version=0.0.4; charset=utf-8", [] { return std::string("troupe_iteration 7\n"); }},
       {"/health", "application/json", [] { return std::string("{\"status\": \"training\"}\n"); }},
       {"/api/history", "application/json", [] { return std::string("{}"); }}});
  ASSERT_GT(http.port(), 0);
  const test::HttpResponse metrics = http_get("127.0.0.1", http.port(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(metrics.body, "troupe_iteration 7\n");
  const test::HttpResponse health = http_get("127.0.0.1", http.port(), "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "{\"status\": \"training\"}\n");
  EXPECT_EQ(http_get("127.0.0.1", http.port(), "/api/history").body, "{}");
  EXPECT_EQ(http_get("127.0.0.1", http.port(), "/").status, 404);
  // Paths match exactly, not as the regular expressions cpp-httplib takes.
  EXPECT_EQ(http_get("127.0.0.1", http.port(), "/metricsX").status, 404);
  EXPECT_EQ(http_get("127.0.0.1", http.port(), "/api/historyy").status, 404);
}

TEST(MetricsHttpServer, ATakenPortIsAnErrorNamingIt) {
  MetricsHttpServer first("127.0.0.1", 0, {});
  try {
    MetricsHttpServer second("127.0.0.1", first.port(), {});
    FAIL() << "bound port " << first.port() << " twice";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(str_cat("cannot serve metrics on 127.0.0.1:", first.port())), std::string::npos) << what;
    EXPECT_NE(what.find("--metrics-port"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace troupe::actors
