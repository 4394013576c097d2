// Slow clients against `troupe serve` on loopback (a tiny random GPT-2 on the CPU): the latency
// of normal requests (GET /health and a 4-token POST /v1/completions, each on a new connection)
// first alone, then while --idle connections sit open sending nothing and --trickling ones send
// a header line every --trickle-interval seconds (each reopened when the server closes it);
// prints p50/p99/max and the requests that failed or took over --request-timeout (the slow phase
// repeats the requests for --slow-seconds, so that the server's timeouts come into play). Then
// --rss-requests small requests over --rss-clients keep-alive connections, printing the server's
// RSS at the start, every tenth of the way, and at the end. Last, --drain-streams streams at once
// and a SIGTERM while they run: how many still end properly. --troupe runs another build of the
// command (the one before a change) for a before/after comparison.
//
//   http_slow_clients --serve-args "--kv-cache-gb 0.25"         # every phase, about 5 minutes on 2 cores
//   http_slow_clients --troupe /tmp/before/troupe --requests 20  # the build before a change (30 s timeouts)
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/hf/hf_checkpoint.hpp"
#include "tests/http_client.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/sse_client.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace {

using namespace troupe;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string troupe = "", serve_args = "";
  int idle = 1000, trickling = 1000, requests = 400, rss_clients = 4, completion_tokens = 4;
  int drain_streams = 200, drain_tokens = 200;
  int64_t rss_requests = 100000;
  double trickle_interval_s = 1, request_timeout_s = 30, slow_seconds = 30;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double rss_mb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

// A tiny random GPT-2 folder with GPT-2's tokenizer (as serve_load_test writes it).
std::string write_tiny_model(const test::TempDir& dir) {
  const GptConfig c = test::tiny_inference_config(false, 64, 256, 50257);
  std::string hf = dir / "hf";
  const ParamLayout layout(c, ChunkSpec::whole_model());
  save_hf_checkpoint(hf, layout, HfArch::gpt2, test::random_normal({layout.size()}, 4, 0.3f));
  std::filesystem::copy_file(test::source_path("assets/gpt2/gpt2-vocab.json"), hf + "/vocab.json");
  std::filesystem::copy_file(test::source_path("assets/gpt2/gpt2-merges.txt"), hf + "/merges.txt");
  return hf;
}

// A connected socket (no timeouts), or -1.
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& s) {
  for (size_t sent = 0; sent < s.size();) {
    const ssize_t n = ::send(fd, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

// --idle connections that send nothing and --trickling ones that send a header line every
// interval, each reopened when the server closes it; counts the closes (the server's timeouts).
class SlowClients {
 public:
  SlowClients(int port, int idle, int trickling, double interval_s) : port_(port), interval_s_(interval_s) {
    for (int i = 0; i < idle + trickling; ++i) conns_.push_back({-1, i >= idle});
    for (Conn& c : conns_) open(c);
    thread_ = std::thread([this] { run(); });
  }
  ~SlowClients() {
    done_ = true;
    thread_.join();
    for (Conn& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
  }
  int open_now() const { return open_; }
  int closed_by_server() const { return closed_; }
  int failed_connects() const { return failed_; }

 private:
  struct Conn {
    int fd;
    bool trickling;
  };
  void open(Conn& c) {
    c.fd = connect_to(port_);
    if (c.fd < 0) {
      ++failed_;
      return;
    }
    ++open_;
    if (c.trickling && !send_all(c.fd, "POST /v1/completions HTTP/1.1\r\nHost: bench\r\n")) lost(c);
  }
  void lost(Conn& c) {
    ::close(c.fd);
    c.fd = -1;
    --open_;
    ++closed_;
  }
  void run() {
    while (!done_) {
      const auto t0 = Clock::now();
      for (Conn& c : conns_) {
        if (done_) return;
        if (c.fd < 0) {
          open(c);
          continue;
        }
        char buf[512];
        const ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
          lost(c);
          continue;
        }
        if (c.trickling && !send_all(c.fd, "X-Slow: 1\r\n")) lost(c);
      }
      const double left = interval_s_ - seconds_since(t0);
      if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
    }
  }

  int port_;
  double interval_s_;
  std::vector<Conn> conns_;
  std::atomic<bool> done_{false};
  std::atomic<int> open_{0}, closed_{0}, failed_{0};
  std::thread thread_;
};

struct Latencies {
  std::vector<double> health, completion;
  int failed = 0;
  std::string first_error;
};

// --requests normal requests, alternating /health and a short completion, from two clients,
// each on a new connection as curl would.
Latencies normal_requests(int port, const Options& o) {
  Latencies out;
  std::mutex mu;
  const std::string body =
      str_cat(R"({"prompt": "the sea was calm", "max_tokens": )", o.completion_tokens, R"(, "temperature": 0})");
  auto client = [&](int first) {
    for (int i = first; i < o.requests; i += 2) {
      const bool health = i % 4 < 2;
      const auto t0 = Clock::now();
      try {
        const test::HttpResponse r =
            health ? test::http_request("GET", "127.0.0.1", port, "/health", "", int(o.request_timeout_s))
                   : test::http_request("POST", "127.0.0.1", port, "/v1/completions", body, int(o.request_timeout_s));
        const double s = seconds_since(t0);
        std::lock_guard lock(mu);
        if (r.status != 200) {
          if (out.failed++ == 0) out.first_error = str_cat("HTTP ", r.status, ": ", r.body.substr(0, 200));
          continue;
        }
        (health ? out.health : out.completion).push_back(s);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        if (out.failed++ == 0) out.first_error = e.what();
      }
    }
  };
  std::thread a(client, 0), b(client, 1);
  a.join();
  b.join();
  return out;
}

void append(Latencies& all, const Latencies& more) {
  all.health.insert(all.health.end(), more.health.begin(), more.health.end());
  all.completion.insert(all.completion.end(), more.completion.begin(), more.completion.end());
  if (all.failed == 0) all.first_error = more.first_error;
  all.failed += more.failed;
}

void print_latencies(const char* phase, const Latencies& l) {
  std::vector<double> all = l.health;
  all.insert(all.end(), l.completion.begin(), l.completion.end());
  std::printf(
      "%-28s %4zu requests: p50 %6.1f ms p99 %7.1f ms max %7.1f ms | /health p99 %7.1f ms | completion p99 %7.1f ms "
      "| failed %d%s%s\n",
      phase, all.size() + size_t(l.failed), 1e3 * percentile(all, 0.5), 1e3 * percentile(all, 0.99),
      1e3 * percentile(all, 1.0), 1e3 * percentile(l.health, 0.99), 1e3 * percentile(l.completion, 0.99), l.failed,
      l.first_error.empty() ? "" : " first: ", l.first_error.substr(0, 160).c_str());
  std::fflush(stdout);
}

// A keep-alive client for the RSS run: one request and its Content-Length answer at a time,
// reconnecting when the server closes (cpp-httplib closes after 5 requests).
class KeepAliveClient {
 public:
  explicit KeepAliveClient(int port) : port_(port) {}
  ~KeepAliveClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  int request(const std::string& request) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (fd_ < 0 && (fd_ = connect_to(port_)) < 0) continue;
      const int status = exchange(request);
      if (status > 0) return status;
      ::close(fd_);
      fd_ = -1;
      raw_.clear();
    }
    return -1;
  }

 private:
  int exchange(const std::string& request) {
    if (!send_all(fd_, request)) return -1;
    size_t head_end;
    while ((head_end = raw_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return -1;
    const test::HttpResponse head = test::parse_http_head(raw_.substr(0, head_end + 2));
    raw_.erase(0, head_end + 4);
    auto length = head.headers.find("content-length");
    const size_t n = length == head.headers.end() ? 0 : std::stoul(length->second);
    while (raw_.size() < n)
      if (!fill()) return -1;
    raw_.erase(0, n);
    auto connection = head.headers.find("connection");
    if (connection != head.headers.end() && connection->second == "close") {
      ::close(fd_);
      fd_ = -1;
      raw_.clear();
    }
    return head.status;
  }
  bool fill() {
    char buf[8192];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    raw_.append(buf, size_t(n));
    return true;
  }
  int port_, fd_ = -1;
  std::string raw_;
};

void rss_run(int port, pid_t server, const Options& o) {
  const std::string health = "GET /health HTTP/1.1\r\nHost: bench\r\n\r\n";
  const std::string body = R"({"prompt": "the sea", "max_tokens": 1, "temperature": 0})";
  const std::string completion = str_cat(
      "POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
      "\r\n\r\n", body);
  std::atomic<int64_t> next{0}, failed{0};
  const int64_t step = std::max<int64_t>(o.rss_requests / 10, 1);
  std::printf("RSS: start %.1f MB\n", rss_mb(server));
  std::fflush(stdout);
  const auto t0 = Clock::now();
  std::mutex print_mu;
  auto client = [&] {
    KeepAliveClient c(port);
    for (int64_t i; (i = next++) < o.rss_requests;) {
      if (c.request(i % 2 == 0 ? health : completion) != 200) ++failed;
      const int64_t done = i + 1;
      if (done % step == 0) {
        std::lock_guard lock(print_mu);
        std::printf("RSS: after %lld requests %.1f MB (%.0f requests/s)\n", static_cast<long long>(done),
                    rss_mb(server), double(done) / seconds_since(t0));
        std::fflush(stdout);
      }
    }
  };
  std::vector<std::thread> clients;
  for (int k = 0; k < o.rss_clients; ++k) clients.emplace_back(client);
  for (std::thread& t : clients) t.join();
  std::printf("RSS: end %.1f MB after %lld requests in %.1f s, %lld failed\n", rss_mb(server),
              (long long)o.rss_requests, seconds_since(t0), (long long)failed.load());
}

// --drain-streams streamed completions at once, SIGTERM once they have begun: how many end with
// [DONE] (a drain lets them all finish), and how long the server takes to exit.
void drain_run(int port, test::Troupe& server, const Options& o) {
  const std::string body = str_cat(R"({"prompt": "the sea was calm", "max_tokens": )", o.drain_tokens,
                                   R"(, "temperature": 0, "stream": true})");
  std::atomic<int> begun{0}, done{0}, refused{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < o.drain_streams; ++i)
    clients.emplace_back([&] {
      try {
        test::SseClient c("127.0.0.1", port, "/v1/completions", body, 120);
        if (c.head().status != 200) {
          ++refused;
          return;
        }
        bool first = true;
        for (std::optional<std::string> e; (e = c.next());) {
          if (first) ++begun;
          first = false;
          if (*e == "[DONE]") ++done;
        }
      } catch (const std::exception&) {  // cut: reset or closed mid-stream
      }
    });
  for (auto t0 = Clock::now(); begun + refused < o.drain_streams && seconds_since(t0) < 10;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int at_signal = begun;
  const auto t0 = Clock::now();
  server.signal(SIGTERM);
  const std::optional<int> code = server.wait(std::chrono::seconds(120));
  const double exit_s = seconds_since(t0);
  for (std::thread& t : clients) t.join();
  std::printf("SIGTERM with %d streams begun (of %d; %d refused): %d ended with [DONE], %d cut; exit %d after %.1f s\n",
              at_signal, o.drain_streams, refused.load(), done.load(), o.drain_streams - refused - done,
              code.value_or(-1), exit_s);
}

int run(const Options& o) {
  // Each slow connection is a file of this process.
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);

  const test::TempDir dir("http-slow-clients");
  const std::string hf = write_tiny_model(dir);
  std::vector<std::string> args{"serve", "--hf", hf, "--device", "cpu", "--port", "0"};
  std::istringstream extra(o.serve_args);
  for (std::string a; extra >> a;) args.push_back(a);
  // --troupe: `bash -c 'shift; exec TROUPE "$@"'` drops the built binary the launcher adds.
  const std::vector<std::string> launcher =
      o.troupe.empty() ? std::vector<std::string>{}
                       : std::vector<std::string>{"bash", "-c", "shift; exec \"$0\" \"$@\"", o.troupe};
  test::Troupe server(launcher, args, dir / "serve.log");
  std::smatch m;
  std::string log;
  for (auto t0 = Clock::now(); !std::regex_search(log = server.output(), m, std::regex("http://127.0.0.1:(\\d+)"));) {
    if (server.wait(std::chrono::milliseconds(100)) || seconds_since(t0) > 300) {
      std::fprintf(stderr, "troupe serve did not start:\n%s\n", log.c_str());
      return 1;
    }
  }
  const int port = std::stoi(m[1]);
  std::printf("troupe serve (%s) on port %d, pid %d\n", o.troupe.empty() ? "this build" : o.troupe.c_str(), port,
              int(server.pid()));
  normal_requests(port, {.requests = 20});  // warm up
  print_latencies("alone:", normal_requests(port, o));
  if (o.idle + o.trickling > 0) {
    SlowClients slow(port, o.idle, o.trickling, o.trickle_interval_s);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::printf("slow clients: %d open of %d (%d failed to connect)\n", slow.open_now(), o.idle + o.trickling,
                slow.failed_connects());
    // Rounds of normal requests for --slow-seconds at least: long enough for the server's header
    // and idle timeouts to close slow connections (which reopen) while requests go on.
    Latencies l;
    for (const auto t0 = Clock::now();
         l.health.size() + l.completion.size() + size_t(l.failed) == 0 || seconds_since(t0) < o.slow_seconds;)
      append(l, normal_requests(port, o));
    print_latencies(str_cat("with ", o.idle, " idle + ", o.trickling, " trickling:").c_str(), l);
    std::printf("slow clients: %d closed by the server meanwhile, %d open at the end\n", slow.closed_by_server(),
                slow.open_now());
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  print_latencies("after the slow clients left:", normal_requests(port, o));
  if (o.rss_requests > 0) rss_run(port, server.pid(), o);
  if (o.drain_streams > 0) {
    drain_run(port, server, o);
    return 0;
  }
  server.signal(SIGTERM);
  const std::optional<int> code = server.wait(std::chrono::seconds(60));
  std::printf("SIGTERM: exit %d\n", code.value_or(-1));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Slow clients against troupe serve: latency of normal requests, and RSS over many requests");
  app.add_option("--troupe", o.troupe, "run this troupe binary instead of this build's");
  app.add_option("--serve-args", o.serve_args, "more flags for troupe serve, space-separated");
  app.add_option("--idle", o.idle, "connections that send nothing");
  app.add_option("--trickling", o.trickling, "connections that send a header line every --trickle-interval");
  app.add_option("--trickle-interval", o.trickle_interval_s, "seconds between a trickling connection's lines");
  app.add_option("--requests", o.requests, "normal requests per phase (half /health, half completions)");
  app.add_option("--slow-seconds", o.slow_seconds,
                 "with the slow clients, rounds of --requests for this long at least");
  app.add_option("--completion-tokens", o.completion_tokens, "max_tokens of the normal completions");
  app.add_option("--request-timeout", o.request_timeout_s, "seconds before a normal request counts as failed");
  app.add_option("--rss-requests", o.rss_requests, "small keep-alive requests for the RSS run (0: none)");
  app.add_option("--rss-clients", o.rss_clients, "keep-alive connections of the RSS run");
  app.add_option("--drain-streams", o.drain_streams, "streams in flight at the closing SIGTERM (0: none)");
  app.add_option("--drain-tokens", o.drain_tokens, "max_tokens of those streams");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "http_slow_clients: %s\n", e.what());
    return 1;
  }
}
