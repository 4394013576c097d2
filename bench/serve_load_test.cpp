// Load test of `troupe serve` on loopback: starts the server on a model (a tiny random GPT-2 on
// the CPU by default, or GPT-2 124M/350M shapes with random weights, or an HF folder), fires
// --requests requests with Poisson arrivals (--rate per second; 0: all at once), random prompt
// and output lengths, half of them streamed (server-sent events), a share greedy. Every answer
// is checked: HTTP 200 with valid JSON and the requested number of tokens (or a stop), or a 503
// (the router's bound). Greedy answers are then compared with the same request sent alone
// (--verify; off on GPUs, where batch shapes change bf16 rounding). Prints counts, latency,
// time to first token and time per output token p50/p99, output tokens/s, and the server's RSS
// before and after each wave of requests (--waves); exits 1 when an answer is wrong, fewer than
// --min-refused requests were refused, or the RSS
// grew more than --max-rss-growth-mb in all, or more than a quarter of that after the first
// wave (a leak keeps climbing; allocator arenas and thread stacks level off).
//
//   serve_load_test --requests 300 --rate 150                      # tiny CPU model, ~1 minute
//   serve_load_test --model gpt2-124m --device cuda --requests 2000 --rate 100 --verify 0
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "model/hf/hf_checkpoint.hpp"
#include "tests/http_client.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/sse_client.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace {

using namespace troupe;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "tiny", hf, device = "cpu", serve_args;
  int requests = 300, min_refused = 0, waves = 2, malloc_arena_max = 4;
  int max_prompt_words = 40, max_output = 48, verify = 1, http_threads = 0;
  double rate = 150, greedy_share = 0.5, stream_share = 0.5, max_rss_growth_mb = 512, kv_cache_gb = 0.25;
  int64_t max_queued = 64, max_running = 16;
  uint64_t seed = 1;
};

struct Request {
  std::string prompt;
  int max_tokens = 0;
  bool greedy = false, stream = false;
  double start_s = 0;  // arrival, from the start of the run
};

struct Outcome {
  int status = 0;
  std::string error;  // why the answer is wrong ("" when right)
  std::string text, finish;
  int tokens = 0;
  double latency_s = 0, ttft_s = -1, tpot_s = -1;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The server's resident memory, MB (VmRSS of /proc/PID/status).
double rss_mb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

json body_of(const Request& r) {
  json b = {{"prompt", r.prompt}, {"max_tokens", r.max_tokens}, {"seed", 7}};
  if (r.greedy)
    b["temperature"] = 0;
  else
    b["top_k"] = 20;
  if (r.stream) b["stream"] = true;
  return b;
}

std::string check_finish(const std::string& finish, int tokens, int wanted) {
  if (finish == "length" && tokens == wanted) return "";
  if (finish == "stop" && tokens <= wanted) return "";
  return troupe::str_cat("finish '", finish, "' after ", tokens, " of ", wanted, " tokens");
}

Outcome send_plain(int port, const Request& r) {
  Outcome o;
  const auto t0 = Clock::now();
  const test::HttpResponse res =
      test::http_request("POST", "127.0.0.1", port, "/v1/completions", body_of(r).dump(), /*timeout_s=*/300);
  o.latency_s = seconds_since(t0);
  o.status = res.status;
  const json j = json::parse(res.body, nullptr, false);
  if (j.is_discarded()) return o.error = "not JSON: " + res.body.substr(0, 200), o;
  if (res.status == 503) return o.error = j.contains("error") ? "" : "a 503 without an error object", o;
  if (res.status != 200) return o.error = res.body.substr(0, 200), o;
  o.text = j["choices"][0]["text"];
  o.finish = j["choices"][0]["finish_reason"];
  o.tokens = j["usage"]["completion_tokens"];
  o.error = check_finish(o.finish, o.tokens, r.max_tokens);
  return o;
}

Outcome send_stream(int port, const Request& r) {
  Outcome o;
  const auto t0 = Clock::now();
  test::SseClient c("127.0.0.1", port, "/v1/completions", body_of(r).dump(), 300);
  o.status = c.head().status;
  if (o.status != 200) {
    o.latency_s = seconds_since(t0);
    const json j = json::parse(c.head().body, nullptr, false);
    o.error = o.status == 503 && !j.is_discarded() && j.contains("error") ? "" : c.head().body.substr(0, 200);
    return o;
  }
  double first = -1, last = 0;
  bool done = false;
  for (std::optional<std::string> e; (e = c.next());) {
    if (*e == "[DONE]") {
      done = true;
      break;
    }
    const json j = json::parse(*e, nullptr, false);
    if (j.is_discarded() || !j.contains("choices") || j["choices"].empty())
      return o.error = "bad event: " + e->substr(0, 200), o;
    last = seconds_since(t0);
    if (first < 0) first = last;
    ++o.tokens;
    o.text += j["choices"][0]["text"].get<std::string>();
    if (!j["choices"][0]["finish_reason"].is_null()) o.finish = j["choices"][0]["finish_reason"];
  }
  o.latency_s = seconds_since(t0);
  if (!done) return o.error = "the stream ended without [DONE]", o;
  o.ttft_s = first;
  if (o.tokens > 1) o.tpot_s = (last - first) / (o.tokens - 1);
  o.error = check_finish(o.finish, o.tokens, r.max_tokens);
  return o;
}

Outcome send(int port, const Request& r) {
  try {
    return r.stream ? send_stream(port, r) : send_plain(port, r);
  } catch (const std::exception& e) {
    Outcome o;
    o.error = e.what();
    return o;
  }
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

// Writes a random-weight HF folder of `model` (tiny, gpt2-124m, gpt2-350m) with GPT-2's tokenizer.
std::string write_model(const std::string& model, const test::TempDir& dir) {
  GptConfig c = model == "tiny" ? test::tiny_inference_config(false, 64, 256, 50257) : GptConfig::preset(model);
  std::string hf = dir / "hf";
  const ParamLayout layout(c, ChunkSpec::whole_model());
  save_hf_checkpoint(hf, layout, HfArch::gpt2, test::random_normal({layout.size()}, 4, model == "tiny" ? 0.3f : 0.02f));
  std::filesystem::copy_file(test::source_path("assets/gpt2/gpt2-vocab.json"), hf + "/vocab.json");
  std::filesystem::copy_file(test::source_path("assets/gpt2/gpt2-merges.txt"), hf + "/merges.txt");
  return hf;
}

std::vector<Request> make_requests(const Options& o) {
  static const char* kWords[] = {"the",  "sea", "was",   "calm",  "and",   "a",    "ship", "sailed", "north", "under",
                                 "grey", "sky", "while", "gulls", "cried", "over", "its",  "wake",   "at",    "dawn"};
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> words(1, o.max_prompt_words), out(1, o.max_output), word(0, 19);
  std::uniform_real_distribution<double> u(0, 1);
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1);
  std::vector<Request> reqs(size_t(o.requests));
  double t = 0;
  for (Request& r : reqs) {
    for (int w = words(rng); w > 0; --w) r.prompt += std::string(r.prompt.empty() ? "" : " ") + kWords[word(rng)];
    r.max_tokens = out(rng);
    r.greedy = u(rng) < o.greedy_share;
    r.stream = u(rng) < o.stream_share;
    r.start_s = t;
    if (o.rate > 0) t += gap(rng);
  }
  return reqs;
}

int run(const Options& o) {
  const test::TempDir dir("serve-load");
  const std::string hf = o.hf.empty() ? write_model(o.model, dir) : o.hf;
  std::vector<std::string> args{"serve",
                                "--hf",
                                hf,
                                "--device",
                                o.device,
                                "--port",
                                "0",
                                "--http-threads",
                                std::to_string(o.http_threads),
                                "--max-queued-requests",
                                std::to_string(o.max_queued),
                                "--inference-max-requests",
                                std::to_string(o.max_running),
                                "--kv-cache-gb",
                                std::to_string(o.kv_cache_gb)};
  std::istringstream extra(o.serve_args);
  for (std::string a; extra >> a;) args.push_back(a);
  // glibc gives each of the server's hundreds of threads up to 8 arenas per core, whose
  // fragmentation reads as slow RSS growth; a few arenas show what the server itself holds.
  if (o.malloc_arena_max > 0)
    TROUPE_SYSCALL(::setenv("MALLOC_ARENA_MAX", std::to_string(o.malloc_arena_max).c_str(), 1), "setenv");
  test::Troupe server(args, dir / "serve.log");
  std::smatch m;
  std::string log;
  for (auto t0 = Clock::now(); !std::regex_search(log = server.output(), m, std::regex("http://127.0.0.1:(\\d+)"));) {
    if (server.wait(std::chrono::milliseconds(100)) || seconds_since(t0) > 300) {
      std::fprintf(stderr, "troupe serve did not start:\n%s\n", log.c_str());
      return 1;
    }
  }
  const int port = std::stoi(m[1]);
  const std::vector<Request> reqs = make_requests(o);
  // Warm up (first allocations, CUDA graphs), then the baseline memory.
  for (int i = 0; i < 3; ++i) send(port, {.prompt = "warm up", .max_tokens = o.max_output, .greedy = true});
  const double rss_before = rss_mb(server.pid());

  // The load in waves: the RSS after each shows whether memory levels off (bounded) or climbs.
  std::vector<Outcome> out(reqs.size());
  std::vector<double> rss_after_wave;
  double wall_s = 0;
  for (int wave = 0; wave < o.waves; ++wave) {
    std::vector<std::thread> clients;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < reqs.size(); ++i) {
      const double wait = reqs[i].start_s - seconds_since(t0);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      clients.emplace_back([&, i] { out[i] = send(port, reqs[i]); });
    }
    for (std::thread& c : clients) c.join();
    wall_s = seconds_since(t0);
    rss_after_wave.push_back(rss_mb(server.pid()));
    std::printf("wave %d: %.2f s, server RSS %.1f MB\n", wave + 1, wall_s, rss_after_wave.back());
  }
  const double rss_after = rss_after_wave.back();
  const double wave_growth = rss_after - rss_after_wave.front();  // after the first wave

  int ok = 0, refused = 0, wrong = 0, mismatched = 0, verified = 0;
  int64_t tokens = 0;
  std::vector<double> latency, ttft, tpot;
  std::map<std::string, int> errors;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Outcome& r = out[i];
    if (!r.error.empty()) {
      ++wrong;
      if (errors[r.error]++ == 0) std::fprintf(stderr, "request %zu: %s\n", i, r.error.c_str());
      continue;
    }
    if (r.status == 503) {
      ++refused;
      continue;
    }
    ++ok;
    tokens += r.tokens;
    latency.push_back(r.latency_s);
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    if (r.tpot_s >= 0) tpot.push_back(r.tpot_s);
  }
  // Greedy answers against the same request alone (a plain call, one at a time).
  for (size_t i = 0; o.verify && i < reqs.size(); ++i) {
    if (!reqs[i].greedy || out[i].status != 200 || !out[i].error.empty()) continue;
    Request alone = reqs[i];
    alone.stream = false;
    const Outcome a = send(port, alone);
    ++verified;
    if (a.text != out[i].text || a.finish != out[i].finish) {
      if (mismatched++ == 0) std::fprintf(stderr, "request %zu differs from its run alone\n", i);
    }
  }
  server.signal(SIGTERM);
  const std::optional<int> code = server.wait(std::chrono::seconds(60));

  std::printf("requests %d: ok %d, refused (503) %d, wrong %d; greedy checked alone %d, differing %d\n", o.requests, ok,
              refused, wrong, verified, mismatched);
  std::printf("last wave: wall %.2f s, output tokens %lld, %.1f tokens/s\n", wall_s, (long long)tokens,
              double(tokens) / wall_s);
  std::printf("latency p50 %.1f ms p99 %.1f ms; TTFT p50 %.1f ms p99 %.1f ms; TPOT p50 %.2f ms p99 %.2f ms\n",
              1e3 * percentile(latency, 0.5), 1e3 * percentile(latency, 0.99), 1e3 * percentile(ttft, 0.5),
              1e3 * percentile(ttft, 0.99), 1e3 * percentile(tpot, 0.5), 1e3 * percentile(tpot, 0.99));
  std::printf(
      "server RSS before %.1f MB, after %.1f MB (growth %.1f MB, of which %.1f MB after the first wave; "
      "bound %.0f MB); exit %d\n",
      rss_before, rss_after, rss_after - rss_before, wave_growth, o.max_rss_growth_mb, code.value_or(-1));
  std::printf("RESULT %s\n", json{{"requests", o.requests},
                                  {"ok", ok},
                                  {"refused", refused},
                                  {"wrong", wrong},
                                  {"mismatched", mismatched},
                                  {"tokens_per_s", double(tokens) / wall_s},
                                  {"ttft_p50_ms", 1e3 * percentile(ttft, 0.5)},
                                  {"ttft_p99_ms", 1e3 * percentile(ttft, 0.99)},
                                  {"tpot_p50_ms", 1e3 * percentile(tpot, 0.5)},
                                  {"tpot_p99_ms", 1e3 * percentile(tpot, 0.99)},
                                  {"rss_before_mb", rss_before},
                                  {"rss_after_mb", rss_after},
                                  {"rss_growth_after_wave1_mb", wave_growth}}
                                 .dump()
                                 .c_str());
  const bool answers_ok = wrong == 0 && mismatched == 0 && ok > 0 && refused >= o.min_refused;
  const bool memory_ok = rss_after - rss_before <= o.max_rss_growth_mb && wave_growth <= o.max_rss_growth_mb / 4;
  const bool pass = answers_ok && memory_ok && code == std::optional<int>(0);
  if (!pass) std::printf("FAILED\n");
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Load test of troupe serve on loopback");
  app.add_option("--model", o.model, "tiny, gpt2-124m or gpt2-350m (random weights)");
  app.add_option("--hf", o.hf, "serve this HF folder instead");
  app.add_option("--device", o.device, "cpu or cuda");
  app.add_option("--requests", o.requests, "requests in all");
  app.add_option("--waves", o.waves, "send the requests this many times (the last wave's answers are checked)")
      ->check(CLI::Range(1, 100));
  app.add_option("--rate", o.rate, "mean arrivals per second (Poisson); 0: all at once");
  app.add_option("--max-prompt-words", o.max_prompt_words, "prompt lengths are uniform in [1, N] words");
  app.add_option("--max-output", o.max_output, "max_tokens is uniform in [1, N]");
  app.add_option("--greedy-share", o.greedy_share, "share of greedy requests (the rest sample with top_k 20)");
  app.add_option("--stream-share", o.stream_share, "share of streamed requests");
  app.add_option("--verify", o.verify, "1: compare greedy answers with the request alone");
  app.add_option("--max-queued-requests", o.max_queued, "the server's queue bound");
  app.add_option("--max-running", o.max_running, "the server's --inference-max-requests");
  app.add_option("--http-threads", o.http_threads, "the server's HTTP threads (0: its default)");
  app.add_option("--kv-cache-gb", o.kv_cache_gb, "the server's KV cache, GiB");
  app.add_option("--max-rss-growth-mb", o.max_rss_growth_mb, "fail above this server RSS growth");
  app.add_option("--malloc-arena-max", o.malloc_arena_max, "MALLOC_ARENA_MAX of the server (0: glibc's default)");
  app.add_option("--serve-args", o.serve_args, "more flags for troupe serve, space-separated");
  app.add_option("--seed", o.seed, "request mix seed");
  app.add_option("--min-refused", o.min_refused,
                 "fail unless at least this many requests get 503 (a burst over the bound)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve_load_test: %s\n", e.what());
    return 1;
  }
}
