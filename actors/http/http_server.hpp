// An HTTP/1.1 server on threads of its own (cpp-httplib) whose routes map a request body to a
// reply: the JSON APIs of `troupe serve`. Handlers run on the server's threads; a reply may
// stream (server-sent events), its writer telling it when the client has gone.
//
//   HttpServer http("0.0.0.0", 5000, {{"PUT", "/api", [&](const std::string& body) { return api.megatron(body); }}});
//   std::printf("serving on port %d\n", http.port());
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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
};

struct HttpRoute {
  std::string method;  // GET, POST or PUT
  std::string path;
  std::function<HttpReply(const std::string& body)> handler;
};

class HttpServer {
 public:
  // Binds host:port (port 0: a free one) and starts serving with `threads` handler threads;
  // throws troupe::Error naming the address, and the flags that set it (`flag_prefix` "metrics":
  // --metrics-host/--metrics-port), when it cannot bind. Routes match their paths exactly.
  HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes, int threads = 8,
             const std::string& flag_prefix = "");
  ~HttpServer();  // stops serving and joins the threads
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Blocks until the server stops (stop() from another thread, or the destructor).
  void wait();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
