// The monitor's HTTP endpoint: GET of a fixed set of paths (/metrics, /health, / and
// /api/history), 404 for anything else, served by an HttpServer (actors/http/http_server.hpp) on
// threads of its own, so a slow or hostile client never touches the training threads.
//
//   MetricsHttpServer http("127.0.0.1", 9100, {{"/metrics", "text/plain", [&] { return metrics.prometheus_text(); }},
//                                              {"/health", "application/json", [&] { ... }}});  // throws naming
//                                              host:port
//   std::printf("metrics on http://127.0.0.1:%d/metrics\n", http.port());
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace troupe::actors {

class HttpServer;

struct MetricsRoute {
  std::string path;          // exact: "/metrics"
  std::string content_type;  // "text/plain; version=0.0.4; charset=utf-8"
  std::function<std::string()> body;
};

class MetricsHttpServer {
 public:
  // Binds host:port (port 0: a free one) and starts serving; throws troupe::Error naming the
  // address and --metrics-host/--metrics-port when it cannot bind (port in use, not an address
  // of this machine).
  MetricsHttpServer(const std::string& host, int port, const std::vector<MetricsRoute>& routes);
  ~MetricsHttpServer();  // stops serving and joins the threads
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const;
  const std::string& host() const { return host_; }

 private:
  std::string host_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace troupe::actors
