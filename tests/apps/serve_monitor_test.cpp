// `troupe serve` with --monitor-endpoint and --metrics-port, as a user would run it: a CPU
// server on a tiny GPT-2 folder as a child process, a live `troupe monitor` attached, a few
// OpenAI completions. Then /metrics and `troupe monitor --once` must count exactly the
// requests sent and the completion tokens the answers reported, with TTFT/TPOT quantiles
// and an idle batch; SIGTERM stops the server, and the live monitor sees the `end` and exits 0.
#include <signal.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/hf/hf_checkpoint.hpp"
#include "tests/http_client.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A Prometheus sample's value ("name value" or "name{labels} value" line), NaN when absent.
double metric(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  return at == std::string::npos ? NAN : std::stod(text.substr(at + sample.size() + 2));
}

// The port of "serving MODEL on http://127.0.0.1:PORT (PUT /api, ...": -1 if absent.
int serving_port(const std::string& log) {
  const std::string label = " on http://127.0.0.1:";
  const size_t at = log.find(label, log.find("serving "));
  return at == std::string::npos ? -1 : std::stoi(log.substr(at + label.size()));
}

class ServeMonitor : public ::testing::Test {
 protected:
  void SetUp() override {
    const GptConfig config = tiny_inference_config(false, 32, 64, 50257);
    const ParamLayout layout(config, ChunkSpec::whole_model());
    save_hf_checkpoint(hf_, layout, HfArch::gpt2, random_normal({layout.size()}, 4, 0.3f));
    fs::copy_file(source_path("assets/gpt2/gpt2-vocab.json"), fs::path(hf_) / "vocab.json");
    fs::copy_file(source_path("assets/gpt2/gpt2-merges.txt"), fs::path(hf_) / "merges.txt");
  }

  TempDir tmp_{"serve_monitor"};
  std::string hf_ = tmp_ / "hf";
};

TEST_F(ServeMonitor, MetricsAndMonitorCountWhatWasServed) {
  Troupe serve({"serve", "--hf", hf_, "--device", "cpu", "--host", "127.0.0.1", "--port", "0", "--monitor-endpoint",
                "tcp://127.0.0.1:*", "--metrics-port", "0"},
               tmp_ / "serve.txt");
  const std::string log = serve.await_output("(PUT /api", 60s);
  const std::string endpoint = published_endpoint(log);
  const int metrics = metrics_port(log), port = serving_port(log);
  ASSERT_EQ(endpoint.rfind("tcp://127.0.0.1:", 0), 0u) << log;
  ASSERT_GT(metrics, 0) << log;
  ASSERT_GT(port, 0) << log;
  ASSERT_NE(metrics, port);
  Troupe live({"monitor", endpoint, "--timeout", "30"}, tmp_ / "live.txt");  // not a terminal: a line per record
  live.await_output("serving | ", 30s);  // attached: the idle server's records arrive

  // Four requests in three calls (a call's prompts batch together), greedy, of several lengths.
  const std::vector<std::pair<std::vector<std::string>, int>> calls{
      {{"Hello, my name is"}, 9}, {{"The sea was", "One, two, three,"}, 5}, {{"x"}, 1}};
  int64_t requests = 0, completion_tokens = 0, prompt_tokens = 0, multi_token = 0;
  for (const auto& [prompts, max_tokens] : calls) {
    const nlohmann::json body = {{"prompt", prompts}, {"max_tokens", max_tokens}, {"temperature", 0}};
    const HttpResponse r = http_request("POST", "127.0.0.1", port, "/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const nlohmann::json a = nlohmann::json::parse(r.body);
    completion_tokens += a["usage"]["completion_tokens"].get<int64_t>();
    prompt_tokens += a["usage"]["prompt_tokens"].get<int64_t>();
    requests += int64_t(prompts.size());
    // Every answer here has max_tokens tokens unless the model chose its end of text.
    if (max_tokens > 1) multi_token += int64_t(prompts.size());
  }
  ASSERT_EQ(requests, 4);
  ASSERT_GT(completion_tokens, 4);
  std::printf("served %ld requests: %ld prompt tokens, %ld completion tokens\n", long(requests), long(prompt_tokens),
              long(completion_tokens));

  // The workers report when their engine goes idle, the monitor publishes every 0.5 s.
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    std::this_thread::sleep_for(200ms);
    const HttpResponse m = http_get("127.0.0.1", metrics, "/metrics");
    ASSERT_EQ(m.status, 200);
    text = m.body;
  } while (metric(text, "troupe_serving_requests_total") != double(requests) &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(metric(text, "troupe_serving_requests_total"), double(requests)) << text;
  EXPECT_EQ(metric(text, "troupe_serving_generated_tokens_total"), double(completion_tokens)) << text;
  EXPECT_EQ(metric(text, "troupe_serving_prompt_tokens_total"), double(prompt_tokens)) << text;
  EXPECT_EQ(metric(text, "troupe_serving_failed_requests_total"), 0.0) << text;
  EXPECT_EQ(metric(text, "troupe_serving_queue_length"), 0.0) << text;
  EXPECT_EQ(metric(text, "troupe_serving_batch_size"), 0.0) << text;
  EXPECT_EQ(metric(text, "troupe_serving_kv_blocks_used"), 0.0) << text;  // every request gave its blocks back
  EXPECT_GT(metric(text, "troupe_serving_kv_blocks_total"), 0.0) << text;
  EXPECT_EQ(metric(text, "troupe_serving_replicas"), 1.0) << text;
  EXPECT_NE(text.find("# TYPE troupe_serving_time_to_first_token_seconds summary\n"), std::string::npos) << text;
  EXPECT_EQ(metric(text, "troupe_serving_time_to_first_token_seconds_count"), double(requests)) << text;
  const double ttft_p50 = metric(text, "troupe_serving_time_to_first_token_seconds{quantile=\"0.5\"}");
  const double ttft_p99 = metric(text, "troupe_serving_time_to_first_token_seconds{quantile=\"0.99\"}");
  EXPECT_GT(ttft_p50, 0.0) << text;
  EXPECT_LE(ttft_p50, ttft_p99) << text;
  // With 4 samples the p99 is the largest: 4 times it is at least their sum.
  EXPECT_GE(ttft_p99 * double(requests) * 1.000001, metric(text, "troupe_serving_time_to_first_token_seconds_sum"))
      << text;
  // Requests with a second token have a TPOT (an answer may stop early at the end of text).
  const double tpot_count = metric(text, "troupe_serving_time_per_output_token_seconds_count");
  EXPECT_GE(tpot_count, 1.0) << text;
  EXPECT_LE(tpot_count, double(multi_token)) << text;
  EXPECT_GT(metric(text, "troupe_serving_time_per_output_token_seconds{quantile=\"0.5\"}"), 0.0) << text;
  EXPECT_NE(text.find("troupe_info{run_id="), std::string::npos) << text;
  EXPECT_NE(text.find(",kind=\"serve\","), std::string::npos) << text;
  EXPECT_EQ(text.find("troupe_train_iters"), std::string::npos) << "training gauges on a server:\n" << text;
  const HttpResponse health = http_get("127.0.0.1", metrics, "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_NE(health.body.find("\"status\": \"serving\""), std::string::npos) << health.body;

  // `troupe monitor --once`: the same numbers, as JSON.
  Troupe once({"monitor", endpoint, "--once", "--timeout", "20"}, tmp_ / "once.json");
  ASSERT_EQ(once.wait(30s), std::optional<int>(0)) << once.output();
  const nlohmann::json j = nlohmann::json::parse(once.output());
  EXPECT_EQ(j["hello"]["kind"], "serve");
  EXPECT_EQ(j["hello"]["replicas"], 1);
  EXPECT_EQ(j["hello"]["device_kind"], "cpu");
  EXPECT_EQ(j["hello"]["model"], hf_);
  EXPECT_EQ(j["iteration"], nullptr);
  const nlohmann::json& s = j["serving"];
  ASSERT_TRUE(s.is_object()) << j.dump(2);
  std::printf("troupe monitor --once: %s\n", s.dump().c_str());
  EXPECT_EQ(s["requests"], requests);
  EXPECT_EQ(s["generated_tokens"], completion_tokens);
  EXPECT_EQ(s["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(s["queue_length"], 0);
  EXPECT_EQ(s["batch_size"], 0);
  EXPECT_EQ(s["ttft_count"], requests);
  EXPECT_EQ(s["tpot_count"].get<double>(), tpot_count);
  EXPECT_EQ(s["latency_samples"], requests);
  EXPECT_GT(s["ttft_p50_s"].get<double>(), 0.0);
  EXPECT_LE(s["ttft_p50_s"].get<double>(), s["ttft_p99_s"].get<double>());
  EXPECT_LE(s["tpot_p50_s"].get<double>(), s["tpot_p99_s"].get<double>());
  // Rates over the window: at most what was sent; all of it while the window reaches back to the start.
  const double window = s["rate_window_s"].get<double>();
  ASSERT_GT(window, 0.0);
  EXPECT_LE(s["requests_per_second"].get<double>() * window, double(requests) + 1e-6);
  EXPECT_LE(s["tokens_per_second"].get<double>() * window, double(completion_tokens) + 1e-6);
  if (window < 9.5) {
    EXPECT_NEAR(s["tokens_per_second"].get<double>() * window, double(completion_tokens), 1e-6);
  }

  // SIGTERM: the server publishes its end; the live monitor shows it and exits cleanly.
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(20s), std::optional<int>(0)) << serve.output();
  EXPECT_EQ(live.wait(20s), std::optional<int>(0)) << live.output();
  const std::string lines = live.output();
  EXPECT_NE(lines.find("server ended: stopped: stopped by signal 15"), std::string::npos) << lines;
  EXPECT_NE(lines.find(std::string("requests: ") + std::to_string(requests) + " (failed 0)"), std::string::npos)
      << lines;
  EXPECT_NE(lines.find("TTFT ms p50: "), std::string::npos) << lines;
}

}  // namespace
}  // namespace troupe::test
