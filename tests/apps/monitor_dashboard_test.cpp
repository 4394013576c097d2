// The dashboard at / on --metrics-port, in a real browser: a two-stage CPU training run
// serves it; headless Chromium (Debian's `chromium`) loads the page, runs its script against
// the live /api/history, and dumps the DOM: every chart must have drawn data points (the page
// writes data-points="N" on each), and no script error may have been caught (the page's
// window.onerror / unhandledrejection / console.error hooks write into #errors). A screenshot
// must be a valid 1280x900 PNG that is not one flat colour. /api/history and /metrics carry
// the per-stage time breakdown, where a checkpoint save shows as a stall of every stage.
// Skipped, saying why, only when chromium is not installed.
#include <png.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <set>
#include <thread>

#include "tests/http_client.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

// The chromium binary on PATH; "" when there is none.
std::string find_chromium() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    for (const char* name : {"chromium", "chromium-browser"}) {
      const std::filesystem::path p = std::filesystem::path(dirs.substr(start, end - start)) / name;
      if (!p.parent_path().empty() && std::filesystem::exists(p)) return p.string();
    }
    start = end + 1;
  }
  return "";
}

// Runs `command` through the shell; its stdout.
std::string run_capture(const std::string& command, int& exit_code) {
  std::FILE* pipe = ::popen(command.c_str(), "r");
  TROUPE_CHECK(pipe != nullptr, "popen: ", command);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  TROUPE_SYSCALL(status, "pclose: ", command);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

// The value of attribute `attr` in the tag carrying id="id", or "" when either is missing.
std::string attribute(const std::string& dom, const std::string& id, const std::string& attr) {
  const size_t at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t tag_start = dom.rfind('<', at), tag_end = dom.find('>', at);
  const std::string tag = dom.substr(tag_start, tag_end - tag_start);
  const size_t a = tag.find(" " + attr + "=\"");
  if (a == std::string::npos) return "";
  const size_t v = a + attr.size() + 3;
  return tag.substr(v, tag.find('"', v) - v);
}

struct Png {
  uint32_t width = 0, height = 0;
  std::set<uint32_t> colours;  // distinct RGB values (up to a few hundred are counted)
};

// Decodes with libpng (any format, converted to 8-bit RGBA); throws troupe::Error when invalid.
Png read_png(const std::string& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  TROUPE_CHECK(png_image_begin_read_from_file(&image, path.c_str()) != 0, path, ": not a PNG: ", image.message);
  image.format = PNG_FORMAT_RGBA;
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr) == 0) {
    const std::string message = image.message;
    png_image_free(&image);
    TROUPE_FAIL(path, ": a broken PNG: ", message);
  }
  Png png{image.width, image.height, {}};
  for (size_t i = 0; i + 3 < pixels.size() && png.colours.size() < 512; i += 4)
    png.colours.insert(uint32_t(pixels[i]) << 16 | uint32_t(pixels[i + 1]) << 8 | pixels[i + 2]);
  return png;
}

TEST(MonitorDashboard, LoadsInChromiumWithDataInEveryChartAndNoErrors) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (apt-get install chromium; scripts/setup.sh does)";
  TempDir dir("monitor_dashboard");
  Troupe train({"train",
                "--device",
                "cpu",
                "--devices",
                "2",
                "--pipeline-model-parallel-size",
                "2",
                "--mock-data",
                "--vocab-size",
                "128",
                "--num-layers",
                "2",
                "--hidden-size",
                "32",
                "--num-attention-heads",
                "2",
                "--seq-length",
                "16",
                "--micro-batch-size",
                "1",
                "--global-batch-size",
                "4",
                "--train-iters",
                "1000000",
                "--log-interval",
                "2",
                "--eval-interval",
                "20",
                "--eval-iters",
                "1",
                "--save",
                dir / "checkpoints",
                "--save-interval",
                "50",
                "--metrics-port",
                "0"},
               dir / "train.log");
  const int port = metrics_port(train.await_output("monitor: Prometheus metrics on", 60s));
  ASSERT_GT(port, 0) << train.output();

  // The history the page will draw: a few log lines, a traced iteration, a checkpoint stall first.
  auto checkpoint_stall = [](const nlohmann::json& h) {
    for (const auto& st : h["stages"])
      if (st["checkpoint_ns"][0].get<int64_t>() > 0 && st["checkpoint_ns"][1].get<int64_t>() > 0) return true;
    return false;
  };
  nlohmann::json history;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  do {
    std::this_thread::sleep_for(100ms);
    const HttpResponse r = http_get("127.0.0.1", port, "/api/history");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.headers.at("content-type"), "application/json");
    history = nlohmann::json::parse(r.body);
  } while ((history["iterations"].size() < 4 || history["timeline"].empty() || !checkpoint_stall(history)) &&
           std::chrono::steady_clock::now() < deadline);
  ASSERT_GE(history["iterations"].size(), 4u) << history.dump();
  EXPECT_TRUE(checkpoint_stall(history)) << "no iteration after a checkpoint save shows its stall";
  EXPECT_EQ(history["hello"]["pipeline_parallel"], 2);
  EXPECT_GT(history["iterations"].back()["host_memory_bytes"].get<int64_t>(), 0);
  const nlohmann::json& stages = history["stages"].back();
  ASSERT_EQ(stages["busy_ns"].size(), 2u) << stages.dump();
  for (size_t s = 0; s < 2; ++s) {
    int64_t total = 0;
    for (const char* state : {"busy_ns", "communication_ns", "data_ns", "checkpoint_ns", "optimizer_ns", "idle_ns"})
      total += stages[state][s].get<int64_t>();
    EXPECT_EQ(total, stages["end_ns"].get<int64_t>() - stages["start_ns"].get<int64_t>()) << "stage " << s;
    EXPECT_GT(stages["busy_ns"][s].get<int64_t>(), 0) << "stage " << s;
  }
  int forwards = 0;
  for (const auto& op : history["timeline"].back()["ops"]) forwards += op[1] == 0;
  EXPECT_EQ(forwards, 2 * 4);  // P stages x M microbatches of one iteration
  const std::string metrics = http_get("127.0.0.1", port, "/metrics").body;
  EXPECT_NE(metrics.find("\ntroupe_stage_busy_ratio{stage=\"1\"} "), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\ntroupe_stage_seconds_total{stage=\"0\",state=\"idle\"} "), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\ntroupe_trace_events_dropped_total 0\n"), std::string::npos) << metrics;
  const HttpResponse page = http_get("127.0.0.1", port, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(page.body.find("http://"), std::string::npos) << "the page must not load anything from elsewhere";
  EXPECT_EQ(page.body.find("https://"), std::string::npos) << "the page must not load anything from elsewhere";

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  // --disable-dev-shm-usage: containers (CI) often have a 64 MB /dev/shm, too small for Chromium.
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --virtual-time-budget=4000 ";
  int code = 0;
  const std::string dom = run_capture("timeout 90 " + chromium + flags + "--dump-dom " + url + " 2>/dev/null", code);
  ASSERT_EQ(code, 0) << dom;
  EXPECT_EQ(attribute(dom, "errors", "data-count"), "0") << dom;
  for (const char* chart : {"chart-loss", "chart-throughput", "chart-memory", "chart-stages", "chart-timeline"}) {
    const std::string points = attribute(dom, chart, "data-points");
    ASSERT_FALSE(points.empty()) << chart << " has no data-points in\n" << dom;
    EXPECT_GT(std::stoi(points), 0) << chart;
  }
  EXPECT_NE(dom.find("iteration "), std::string::npos) << dom;

  const std::string shot = dir / "dashboard.png";
  run_capture(
      "timeout 90 " + chromium + flags + "--window-size=1280,900 --screenshot=" + shot + " " + url + " >/dev/null 2>&1",
      code);
  ASSERT_EQ(code, 0);
  const Png png = read_png(shot);
  EXPECT_EQ(png.width, 1280u);
  EXPECT_EQ(png.height, 900u);
  EXPECT_GT(png.colours.size(), 16u) << "the screenshot is (nearly) one flat colour";

  train.signal(SIGTERM);
  EXPECT_EQ(train.wait(60s), std::optional<int>(130)) << train.output();
}

}  // namespace
}  // namespace troupe::test
