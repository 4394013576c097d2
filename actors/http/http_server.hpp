// An HTTP/1.1 server whose routes map a request to a reply: the JSON APIs of `troupe serve` and
// the monitor's /metrics. Connections live on an event loop (Boost.Beast over Asio) that costs no
// thread while a client is idle, slow or trickling its headers; handlers run on a pool of worker
// threads, since they may block (an inference request waits for its tokens). A reply may stream
// (server-sent events), its writer telling it when the client has gone. Bounded: connections,
// header and body sizes, and the time a client may take to send them (HttpServerOptions).
//
//   HttpServer http("0.0.0.0", 5000, {{"PUT", "/api", [&](const std::string& body) { return api.megatron(body); }}});
//   std::printf("serving on port %d\n", http.port());
//   ...
//   http.stop();  // drains: no new connections, requests in flight finish (up to shutdown_timeout)
//   http.wait();
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/log.hpp"

namespace troupe::actors {

// Writes one piece of a streamed reply; false once the client is gone (stop then).
using ChunkWriter = std::function<bool(std::string_view)>;

struct HttpReply {
  HttpReply() = default;
  HttpReply(int status, std::string body, std::string content_type = "application/json")
      : status(status), body(std::move(body)), content_type(std::move(content_type)) {}

  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  // When set, the reply is streamed (chunked transfer encoding) instead of `body`: the server
  // calls it once on the handler's thread and ends the reply when it returns.
  std::function<void(const ChunkWriter&)> stream;
  // More header fields ({"Allow", "GET, HEAD"}); Content-Type and Content-Length are set from the above.
  std::vector<std::pair<std::string, std::string>> headers = {};
};

// What a handler that wants more than the body sees (HttpRoute::handle).
struct HttpRequest {
  std::string method;                                        // GET, HEAD, POST, PUT
  std::string target;                                        // as sent: "/v1/completions?x=1"
  std::string path;                                          // the target without its query: "/v1/completions"
  std::vector<std::pair<std::string, std::string>> headers;  // as sent, in order
  std::string body;
  std::string remote;  // the client's address: "127.0.0.1:53422"

  // The value of the first header named `name` (any case); "" when there is none.
  std::string header(std::string_view name) const;
};

struct HttpRoute {
  std::string method;  // GET (HEAD too), POST or PUT
  std::string path;    // exact, without a query: "/v1/completions"
  std::function<HttpReply(const std::string& body)> handler;
  // For handlers that need the headers, method or client (an Authorization header): used
  // instead of `handler` when set.
  std::function<HttpReply(const HttpRequest& request)> handle = {};
};

struct HttpServerOptions {
  // Handler threads: requests handled at once (a streamed reply holds one to its end). Idle and
  // slow connections hold none.
  int threads = 8;
  // Open connections at most (raised to the process's open-file limit allows); beyond, new
  // connections wait in the kernel's listen queue until one closes.
  int max_connections = 4096;
  int64_t max_request_bytes = int64_t(64) << 20;  // a longer body is answered with a JSON 413
  int64_t max_header_bytes = int64_t(64) << 10;   // longer request headers: a JSON 431
  // A connection waiting for a request's first byte (new, or kept alive after a reply) is closed
  // after `idle_timeout`; from that byte the headers must be in within `header_timeout` and then
  // the body within `body_timeout`, or the connection is closed (slow and trickling clients).
  std::chrono::milliseconds idle_timeout{30'000};
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds write_timeout{60'000};  // for the reply, or one chunk of a stream, to leave
  // stop(): requests in flight (streams included) get this long to finish before their
  // connections are closed.
  std::chrono::milliseconds shutdown_timeout{30'000};
  // Errors name the flags that set the address: "metrics" -> --metrics-host/--metrics-port.
  std::string flag_prefix = "";
  // One line per request (client, method, path, status, bytes, milliseconds) at this level, on
  // the logger of `log_role`.
  LogLevel access_log = LogLevel::debug;
  std::string log_role = "http";
  // When set, runs before every route's handler (on its thread); a reply it returns is sent
  // instead (a 401 for a missing API key).
  std::function<std::optional<HttpReply>(const HttpRequest&)> admit = {};
};

class HttpServer {
 public:
  // Binds host:port (port 0: a free one) and starts serving; throws troupe::Error naming the
  // address, and the flags that set it, when it cannot bind. Routes match their paths exactly;
  // other paths get a JSON 404, another method on a known path a JSON 405 with Allow.
  HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes, HttpServerOptions options);
  HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes, int threads = 8,
             const std::string& flag_prefix = "");
  ~HttpServer();  // stop(), wait(), then joins the threads
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Connections open now (those accepted and not yet closed).
  int connections() const;
  // Requests being read, handled or answered now (streams included).
  int requests_in_flight() const;

  // Starts draining and returns: no new connections, idle ones closed, requests in flight
  // finish and their connections close; those left after shutdown_timeout are closed then.
  void stop();
  // stop(), closing every connection now (a stream's writer then returns false).
  void stop_now();
  // Blocks until the server has stopped: stop() was called and every connection is closed.
  void wait();
  // wait() for at most `limit`: whether the server has stopped.
  bool wait_for(std::chrono::milliseconds limit);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
