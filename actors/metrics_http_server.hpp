// A small HTTP/1.1 server for the monitor, on threads of its own (cpp-httplib): GET /metrics
// (Prometheus text) and GET /health (JSON), nothing else. The handlers produce the body on the
// server's threads, so a slow or hostile client never touches the training threads.
//
//   MetricsHttpServer http("127.0.0.1", 9100, [&] { return metrics.prometheus_text(); },
//                          [&] { return metrics.health_json(); });   // throws naming host:port
//   std::printf("metrics on http://127.0.0.1:%d/metrics\n", http.port());
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace troupe::actors {

class MetricsHttpServer {
 public:
  using Body = std::function<std::string()>;
  // Binds host:port (port 0: a free one) and starts serving; throws troupe::Error naming the
  // address when it cannot bind (port in use, not an address of this machine).
  MetricsHttpServer(const std::string& host, int port, Body metrics, Body health);
  ~MetricsHttpServer();  // stops serving and joins the threads
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const;
  const std::string& host() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
