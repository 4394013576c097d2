// End to end, as a user would: `troupe train` on CPU devices with --monitor-endpoint and
// --metrics-port runs as a child process; `troupe monitor --once` attaches, detaches and
// attaches again; a live `troupe monitor` follows the run; Prometheus /metrics is scraped with
// a plain socket. Every number they report must read exactly as in the train log's line for
// the same iteration. Then the run is stopped (SIGTERM): the live monitor sees the `end` and
// exits cleanly, and attaching to the dead run fails with a clear message.
#include <signal.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>

#include "tests/http_client.hpp"
#include "tests/troupe_process.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

// The text after "label" up to the next " |" in `line`.
std::string field(const std::string& line, const std::string& label) {
  const size_t at = line.find(label);
  if (at == std::string::npos) return "(no " + label + ")";
  const size_t start = at + label.size();
  return line.substr(start, line.find(" |", start) - start);
}

// The train log's line for `iteration` (Megatron's format: "iteration %8ld/%8ld |").
std::string log_line(const std::string& log, int64_t iteration) {
  char key[64];
  std::snprintf(key, sizeof(key), "iteration %8ld/", long(iteration));
  const size_t at = log.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = log.rfind('\n', at) + 1;
  return log.substr(begin, log.find('\n', at) - begin);
}

template <typename... Args>
std::string fmt(const char* f, Args... args) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

// The --once snapshot's iteration record, formatted as the log prints each value, against
// the log's line for that iteration.
void expect_equals_log(const nlohmann::json& it, const std::string& log) {
  const int64_t i = it["iteration"];
  const std::string line = log_line(log, i);
  ASSERT_FALSE(line.empty()) << "iteration " << i << " is not in the log";
  EXPECT_EQ(field(line, "lm loss: "), fmt("%E", it["lm_loss"].get<double>())) << line;
  EXPECT_EQ(field(line, "learning rate: "), fmt("%E", it["learning_rate"].get<double>())) << line;
  EXPECT_EQ(field(line, "grad norm: "), fmt("%.3f", it["grad_norm"].get<double>())) << line;
  EXPECT_EQ(field(line, "loss scale: "), fmt("%.1f", it["loss_scale"].get<double>())) << line;
  EXPECT_EQ(field(line, "elapsed time per iteration (ms): "), fmt("%.1f", it["elapsed_ms_per_iteration"].get<double>()))
      << line;
  EXPECT_EQ(field(line, "throughput per GPU (TFLOP/s/GPU): "), fmt("%.1f", it["tflops_per_device"].get<double>()))
      << line;
  EXPECT_EQ(std::stol(field(line, "consumed samples: ")), it["consumed_samples"].get<int64_t>()) << line;
  EXPECT_EQ(std::stol(field(line, "number of skipped iterations: ")), it["skipped_iterations"].get<int64_t>()) << line;
  EXPECT_EQ(std::stol(field(line, "number of nan iterations: ")), it["nan_iterations"].get<int64_t>()) << line;
  // tokens/s follows from the same window: global batch x seq / elapsed time.
  EXPECT_NEAR(it["tokens_per_second"].get<double>(), 4.0 * 16 / (it["elapsed_ms_per_iteration"].get<double>() / 1e3),
              1e-6 * it["tokens_per_second"].get<double>());
}

// A Prometheus sample's value ("name value" line), NaN when absent.
double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? NAN : std::stod(text.substr(at + name.size() + 2));
}

nlohmann::json attach_once(const TempDir& dir, const std::string& endpoint, const std::string& name) {
  Troupe monitor({"monitor", endpoint, "--once", "--timeout", "30"}, dir / name);
  const std::optional<int> code = monitor.wait(60s);
  const std::string out = monitor.output();
  EXPECT_EQ(code, std::optional<int>(0)) << out;
  try {
    return nlohmann::json::parse(out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "):\n" << out;
    return nlohmann::json();
  }
}

TEST(MonitorEndToEnd, AttachDetachReattachAndTheNumbersAreTheLogs) {
  TempDir dir("monitor_e2e");
  // A tiny model for long enough that the test, not the run, decides when it stops.
  Troupe train({"train",
                "--device",
                "cpu",
                "--mock-data",
                "--vocab-size",
                "256",
                "--num-layers",
                "2",
                "--hidden-size",
                "32",
                "--num-attention-heads",
                "2",
                "--seq-length",
                "16",
                "--micro-batch-size",
                "2",
                "--global-batch-size",
                "4",
                "--train-iters",
                "1000000",
                "--log-interval",
                "5",
                "--eval-interval",
                "40",
                "--eval-iters",
                "1",
                "--lr",
                "1e-3",
                "--monitor-endpoint",
                "tcp://127.0.0.1:*",
                "--metrics-port",
                "0"},
               dir / "train.log");
  std::string log = train.await_output("monitor: Prometheus metrics on", 60s);
  const std::string endpoint = published_endpoint(log);
  ASSERT_EQ(endpoint.rfind("tcp://127.0.0.1:", 0), 0u) << log;
  const size_t url_at = log.find("http://127.0.0.1:");
  ASSERT_NE(url_at, std::string::npos) << log;
  const int metrics_port = std::stoi(log.substr(url_at + 17));
  std::printf("train publishes on %s, metrics on port %d\n", endpoint.c_str(), metrics_port);

  // Attach, detach, attach again: each a separate process.
  const nlohmann::json first = attach_once(dir, endpoint, "once1.json");
  std::this_thread::sleep_for(300ms);
  const nlohmann::json second = attach_once(dir, endpoint, "once2.json");
  ASSERT_TRUE(first.is_object() && second.is_object());
  EXPECT_EQ(first["hello"]["run_id"], second["hello"]["run_id"]);
  EXPECT_EQ(first["hello"]["device_kind"], "cpu");
  EXPECT_EQ(first["hello"]["model"], "gpt2-tiny");
  EXPECT_EQ(first["hello"]["num_layers"], 2);
  EXPECT_EQ(first["hello"]["train_iters"], 1000000);
  EXPECT_EQ(first["hello"]["global_batch_size"], 4);
  EXPECT_EQ(first["schema_version"], 1);
  EXPECT_GT(second["iteration"]["iteration"].get<int64_t>(), first["iteration"]["iteration"].get<int64_t>())
      << "the run did not move on between the two attaches";
  EXPECT_TRUE(first["end"].is_null());
  // The trace reaches the monitor too: each stage's time in the latest traced iteration.
  ASSERT_TRUE(second["stages"].is_object()) << second.dump();
  EXPECT_EQ(second["stages"]["busy_ns"].size(), 1u);
  EXPECT_GT(second["stages"]["busy_ns"][0].get<int64_t>(), 0);
  EXPECT_GT(second["trace_events"].get<int64_t>(), 0);
  EXPECT_EQ(second["dropped_trace_events"], 0);

  // A live monitor (not a terminal: a line per record) for the rest of the run.
  Troupe live({"monitor", endpoint, "--timeout", "30"}, dir / "live.txt");
  live.await_output("| lm loss: ", 30s);

  const HttpResponse scrape = http_get("127.0.0.1", metrics_port, "/metrics");
  EXPECT_EQ(scrape.status, 200);
  EXPECT_EQ(scrape.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  for (const char* family :
       {"troupe_iteration gauge", "troupe_lm_loss gauge", "troupe_learning_rate gauge", "troupe_grad_norm gauge",
        "troupe_tokens_per_second gauge", "troupe_tflops_per_device gauge", "troupe_skipped_iterations_total counter",
        "troupe_run_ended gauge"})
    EXPECT_NE(scrape.body.find(std::string("\n# TYPE ") + family + "\n"), std::string::npos) << family;
  EXPECT_NE(scrape.body.find("troupe_info{run_id=\"" + first["hello"]["run_id"].get<std::string>() + "\""),
            std::string::npos);
  const double scraped_iteration = metric(scrape.body, "troupe_iteration");
  EXPECT_GE(scraped_iteration, double(second["iteration"]["iteration"].get<int64_t>()));
  EXPECT_EQ(metric(scrape.body, "troupe_run_ended"), 0);
  const HttpResponse health = http_get("127.0.0.1", metrics_port, "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_NE(health.body.find("\"status\": \"training\""), std::string::npos) << health.body;

  // Stop the run: it finishes its iteration, publishes `end`, exits 130 (a signal).
  train.signal(SIGTERM);
  EXPECT_EQ(train.wait(120s), std::optional<int>(130)) << train.output();
  EXPECT_EQ(live.wait(30s), std::optional<int>(0)) << live.output();
  const std::string live_out = live.output();
  EXPECT_NE(live_out.find(": stopped: stopped by signal 15"), std::string::npos) << live_out;

  // Every number shown equals the log line of its iteration.
  log = train.output();
  expect_equals_log(first["iteration"], log);
  expect_equals_log(second["iteration"], log);
  const std::string scraped_line = log_line(log, int64_t(scraped_iteration));
  ASSERT_FALSE(scraped_line.empty()) << "scraped iteration " << scraped_iteration << " is not in the log";
  EXPECT_EQ(field(scraped_line, "lm loss: "), fmt("%E", metric(scrape.body, "troupe_lm_loss")));
  EXPECT_EQ(field(scraped_line, "learning rate: "), fmt("%E", metric(scrape.body, "troupe_learning_rate")));
  EXPECT_EQ(field(scraped_line, "grad norm: "), fmt("%.3f", metric(scrape.body, "troupe_grad_norm")));
  int checked = 0;
  std::istringstream lines(live_out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("iteration ", 0) != 0) continue;
    const std::string in_log = log_line(log, std::stol(line.substr(10)));
    ASSERT_FALSE(in_log.empty()) << line;
    for (const char* label : {"lm loss: ", "learning rate: ", "grad norm: ", "loss scale: ",
                              "elapsed time per iteration (ms): ", "throughput per GPU (TFLOP/s/GPU): "})
      EXPECT_EQ(field(line, label), field(in_log, label)) << line << "\n" << in_log;
    ++checked;
  }
  EXPECT_GT(checked, 0) << live_out;
  if (!second["validation"].is_null()) {
    const std::string where =
        fmt(" validation loss at iteration %ld | ", long(second["validation"]["iteration"].get<int64_t>()));
    const size_t at = log.find(where);
    ASSERT_NE(at, std::string::npos) << where;
    const std::string block = log.substr(at, log.find('\n', at) - at);
    EXPECT_EQ(field(block, "lm loss value: "), fmt("%E", second["validation"]["lm_loss"].get<double>()));
    EXPECT_EQ(field(block, "lm loss PPL: "), fmt("%E", second["validation"]["ppl"].get<double>()));
  }

  // The run is gone: attaching says so and fails.
  Troupe dead({"monitor", endpoint, "--once", "--timeout", "2"}, dir / "dead.txt");
  EXPECT_EQ(dead.wait(30s), std::optional<int>(1)) << dead.output();
  EXPECT_NE(dead.output().find("nothing within 2 s from " + endpoint), std::string::npos) << dead.output();
}

TEST(MonitorEndToEnd, APortInUseIsAClearError) {
  TempDir dir("monitor_e2e_port");
  Troupe first({"train",
                "--device",
                "cpu",
                "--mock-data",
                "--vocab-size",
                "64",
                "--num-layers",
                "1",
                "--hidden-size",
                "16",
                "--num-attention-heads",
                "1",
                "--seq-length",
                "8",
                "--micro-batch-size",
                "1",
                "--train-iters",
                "1000000",
                "--log-interval",
                "1000",
                "--eval-interval",
                "0",
                "--monitor-endpoint",
                "tcp://127.0.0.1:*"},
               dir / "first.log");
  const std::string endpoint = published_endpoint(first.await_output("monitor: publishing on ", 60s));
  Troupe second({"train",
                 "--device",
                 "cpu",
                 "--mock-data",
                 "--vocab-size",
                 "64",
                 "--num-layers",
                 "1",
                 "--hidden-size",
                 "16",
                 "--num-attention-heads",
                 "1",
                 "--seq-length",
                 "8",
                 "--micro-batch-size",
                 "1",
                 "--train-iters",
                 "10",
                 "--monitor-endpoint",
                 endpoint},
                dir / "second.log");
  EXPECT_EQ(second.wait(60s), std::optional<int>(1));
  const std::string out = second.output();
  EXPECT_NE(out.find("troupe: error: cannot bind the monitor's ZeroMQ socket to " + endpoint), std::string::npos)
      << out;
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait(60s), std::optional<int>(130)) << first.output();
}

}  // namespace
}  // namespace troupe::test
