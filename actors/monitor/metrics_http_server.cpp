#include "actors/monitor/metrics_http_server.hpp"

#include "actors/http/http_server.hpp"

namespace troupe::actors {

MetricsHttpServer::MetricsHttpServer(const std::string& host, int port, const std::vector<MetricsRoute>& routes)
    : host_(host) {
  std::vector<HttpRoute> get;
  for (const MetricsRoute& r : routes)
    get.push_back({"GET", r.path, [r](const std::string&) { return HttpReply(200, r.body(), r.content_type); }});
  // Two threads are plenty for scrapes.
  server_ = std::make_unique<HttpServer>(host, port, std::move(get), /*threads=*/2, "metrics");
}

MetricsHttpServer::~MetricsHttpServer() = default;

int MetricsHttpServer::port() const { return server_->port(); }

}  // namespace troupe::actors
