// `troupe serve`: the inference actor pool (a router in front of one worker per replica) behind
// Megatron-LM's and OpenAI's HTTP APIs (PUT /api, POST /v1/completions, GET /v1/models, GET /health:
// actors/serve/completion_api.hpp; POST /v1/chat/completions: actors/serve/chat_api.hpp), until SIGINT/SIGTERM. Binds
// 127.0.0.1 unless --host says otherwise. With --monitor-endpoint / --metrics-port the pool's monitor publishes the
// queue, batch, tokens and latencies for `troupe monitor` and Prometheus (apps/serve/serve_monitor.hpp). A signal
// drains the HTTP server: no new connections, requests in flight (streams too) finish for up to --shutdown-timeout
// seconds, then the rest are cut (at once on a second signal).
//
//   troupe serve --hf gpt2 --port 5000 --devices 2
//   curl -X PUT localhost:5000/api -d '{"prompts": ["Hello"], "tokens_to_generate": 16}'
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "actors/serve/api_key.hpp"
#include "actors/serve/chat_api.hpp"
#include "actors/serve/completion_api.hpp"
#include "actors/http/http_server.hpp"
#include "actors/serve/inference_pool.hpp"
#include "apps/commands.hpp"
#include "model/rank_layout.hpp"
#include "apps/common/float_flags.hpp"
#include "apps/common/inference_flags.hpp"
#include "apps/common/monitor_flags.hpp"
#include "apps/serve/serve_monitor.hpp"
#include "base/check.hpp"

namespace troupe::apps {

namespace {

std::atomic<int> g_serve_stop{0};
std::atomic<int> g_serve_signals{0};
extern "C" void on_serve_signal(int sig) {
  g_serve_stop = sig;
  ++g_serve_signals;
}

struct ServeOptions {
  InferenceFlags model;
  std::string host = "127.0.0.1", api_key;
  std::vector<std::string> model_names = {"troupe"};
  int port = 5000, devices = 1, http_threads = 0;
  int64_t max_queued_requests = 256;
  // The HTTP server's bounds (actors/http/http_server.hpp); seconds for the timeouts.
  int64_t max_request_bytes = int64_t(64) << 20;
  int max_connections = 4096;
  double header_timeout = 10, body_timeout = 60, idle_timeout = 30, shutdown_timeout = 30;
  actors::MonitorOptions monitor;  // --monitor-endpoint, --metrics-port, --metrics-host
};

std::chrono::milliseconds to_ms(double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); }

actors::HttpServerOptions http_options(const ServeOptions& o, int threads) {
  return {.threads = threads,
          .max_connections = o.max_connections,
          .max_request_bytes = o.max_request_bytes,
          .idle_timeout = to_ms(o.idle_timeout),
          .header_timeout = to_ms(o.header_timeout),
          .body_timeout = to_ms(o.body_timeout),
          .shutdown_timeout = to_ms(o.shutdown_timeout),
          .access_log = LogLevel::info,
          .admit = actors::api_key_check(o.api_key)};
}

int serve(const ServeOptions& o) {
  // glibc gives threads that allocate arenas of their own, up to 8 per core: the handler threads
  // spread their small allocations over all of them, and the fragmentation reads as RSS that
  // keeps creeping (bench/http_slow_clients: +105 MB over 100k requests with 16 arenas, flat
  // after the first 10k with 4). Before any thread starts; MALLOC_ARENA_MAX, when set, wins.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) ::mallopt(M_ARENA_MAX, 4);
  const InferenceSetup s = load_inference_setup(o.model);
  const int T = o.model.tensor_parallel;
  TROUPE_CHECK(o.devices >= 1 && o.devices % T == 0, "--devices (", o.devices,
               ") must be a positive multiple of --tensor-model-parallel-size (", T, ")");
  const RankLayout layout{.tensor = T, .data = o.devices / T};  // replicas: T consecutive devices each
  const int count = layout.data;
  std::vector<actors::InferenceReplica> replicas;
  for (int k = 0; k < count; ++k) {
    const std::shared_ptr<ReplicaModels> models =
        make_replica_models(o.model, s, layout.rank({.dp = k}), inference_model_options(o.model, 0));
    actors::InferenceReplica r;  // pointers that keep the whole group alive
    r.context = std::shared_ptr<const Context>(models, models->contexts[0].get());
    r.model = std::shared_ptr<InferenceModel>(models, models->models[0].get());
    for (int t = 1; t < T; ++t) r.other_ranks.emplace_back(models, models->models[size_t(t)].get());
    r.engine = engine_options(o.model, s, 0);
    std::shared_ptr<const Tokenizer> tok = s.tokenizer->clone();  // the worker's own (its thread)
    r.detokenize = [tok](std::span<const int32_t> ids) { return tok->decode_skipping_special(ids); };
    replicas.push_back(std::move(r));
  }
  {
    actors::InferencePool pool(std::move(replicas), {.max_queued_requests = o.max_queued_requests});
    if (o.monitor.enabled())
      print_monitor_addresses(pool.start_monitor(
          o.monitor, serve_monitor_hello(s, o.model.hf.empty() ? o.model.load : o.model.hf, count, T)));
    actors::CompletionApi api(pool, *s.tokenizer, {.model_names = o.model_names, .stop_tokens = s.stop_tokens});
    actors::ChatApi chat(pool, *s.tokenizer, s.chat, {.model_names = o.model_names, .stop_tokens = s.stop_tokens});
    std::vector<actors::HttpRoute> routes = api.routes();
    for (actors::HttpRoute& r : chat.routes()) routes.push_back(std::move(r));
    // A handler thread for every request the pool may hold, and spare ones that answer 503 and
    // /health at once: requests never wait long for a thread (idle connections hold none).
    const int64_t threads = o.http_threads > 0 ? o.http_threads : pool.stats().capacity + 16;
    actors::HttpServer http(o.host, o.port, std::move(routes), http_options(o, int(threads)));
    std::printf(
        "serving %s on http://%s:%d (PUT /api, POST /v1/completions, POST /v1/chat/completions%s, GET /v1/models, "
        "GET /health, GET /metrics), %d %s replica%s%s\n",
        o.model.hf.empty() ? o.model.load.c_str() : o.model.hf.c_str(), o.host.c_str(), http.port(),
        s.chat ? "" : " (refused: no chat template)", count, s.cuda ? "GPU" : "CPU", count > 1 ? "s" : "",
        T > 1 ? str_cat(" of ", T, " devices").c_str() : "");
    std::fflush(stdout);
    std::signal(SIGINT, on_serve_signal);
    std::signal(SIGTERM, on_serve_signal);
    while (g_serve_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::printf("signal %d: stopping\n", int(g_serve_stop));
    std::fflush(stdout);
    // Drain: requests in flight finish (up to --shutdown-timeout); another signal cuts them now.
    const int signals = g_serve_signals;
    http.stop();
    while (!http.wait_for(std::chrono::milliseconds(100)))
      if (g_serve_signals > signals) http.stop_now();
    pool.end_monitor(serve_monitor_end(g_serve_stop));
  }  // the server stops, then the actors
  std::printf("stopped\n");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, CommandRunner& run) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Serve a model over HTTP (Megatron's PUT /api and OpenAI /v1/completions)");
  add_inference_flags(cmd, o->model);
  cmd->add_option("--host", o->host, "address to listen on (0.0.0.0: every interface)");
  cmd->add_option("--port", o->port, "port (0: a free one, printed)");
  cmd->add_option("--devices", o->devices,
                  "devices: a model replica (a worker actor) per --tensor-model-parallel-size of them, "
                  "GPUs or CPU devices");
  cmd->add_option("--served-model-name", o->model_names,
                  "names a request's \"model\" may give (GET /v1/models lists them; the first one is the default "
                  "answer's); others get 404")
      ->expected(1, -1);
  cmd->add_option("--api-key", o->api_key,
                  "every /v1/* request must send 'Authorization: Bearer KEY' (else 401); /health, /metrics and "
                  "PUT /api stay open");
  cmd->add_option("--http-threads", o->http_threads,
                  "HTTP handler threads: requests handled at once, a streamed reply holding one to its end; idle "
                  "and slow connections hold none (0: the requests the pool may hold + 16)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-queued-requests", o->max_queued_requests,
                  "requests waiting beyond the replicas' running slots (--inference-max-requests each); "
                  "more get HTTP 503")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-request-bytes", o->max_request_bytes,
                  "a request body over this many bytes is refused with HTTP 413 (default 64 MiB)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-connections", o->max_connections,
                  "open HTTP connections at most; more wait in the listen queue until one closes")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--idle-timeout", o->idle_timeout,
                  "seconds a connection may wait to send a request (new, or kept alive after a reply) before it "
                  "is closed")
      ->check(positive_finite_float());
  cmd->add_option("--header-timeout", o->header_timeout,
                  "seconds from a request's first byte to the end of its headers, or the connection is closed")
      ->check(positive_finite_float());
  cmd->add_option("--body-timeout", o->body_timeout,
                  "seconds to send a request's body after its headers, or the connection is closed")
      ->check(positive_finite_float());
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout,
                  "on SIGINT/SIGTERM, seconds requests in flight (streams too) get to finish before they are cut")
      ->check(non_negative_finite_float());
  add_monitor_flags(cmd, o->monitor);
  cmd->callback([&run, o] { run = [o] { return serve(*o); }; });
}

}  // namespace troupe::apps
