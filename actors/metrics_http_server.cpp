#include "actors/metrics_http_server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "kernels/check.hpp"

namespace troupe::actors {

struct MetricsHttpServer::Impl {
  httplib::Server server;
  std::string host;
  int port = 0;
  std::thread thread;
  std::atomic<bool> finished{false};  // listen_after_bind returned
};

MetricsHttpServer::MetricsHttpServer(const std::string& host, int port, const std::vector<HttpRoute>& routes)
    : impl_(std::make_unique<Impl>()) {
  TROUPE_CHECK(port >= 0 && port <= 65535, "--metrics-port must be in [0, 65535], got ", port);
  Impl& d = *impl_;
  d.host = host;
  httplib::Server& s = d.server;
  // Two threads are plenty for scrapes; cpp-httplib's default is one per core.
  s.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which would let a second run
  // share the port silently instead of failing.
  s.set_socket_options([](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  for (const HttpRoute& route : routes) {
    // cpp-httplib matches patterns as regular expressions: escape the path so it is exact.
    std::string pattern;
    for (char c : route.path) {
      if (std::strchr(".^$|()[]{}*+?\\", c) != nullptr) pattern += '\\';
      pattern += c;
    }
    s.Get(pattern, [route](const httplib::Request&, httplib::Response& res) {
      res.set_content(route.body(), route.content_type);
    });
  }
  errno = 0;
  const bool bound = port == 0 ? (d.port = s.bind_to_any_port(host)) > 0 : s.bind_to_port(host, d.port = port);
  const int err = errno;
  TROUPE_CHECK(bound, "cannot serve metrics on ", host, ":", port, " (--metrics-host/--metrics-port): ",
               err != 0 ? std::strerror(err) : "bind failed",
               " (is another process using that port, or is the address not this machine's?)");
  d.thread = std::thread([&d] {
    d.server.listen_after_bind();
    d.finished = true;
  });
  // stop() only works once the server runs (listen_after_bind's first step): wait for that,
  // so the destructor cannot miss it.
  while (!s.is_running() && !d.finished) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!s.is_running()) {
    d.thread.join();
    TROUPE_FAIL("the metrics server on ", host, ":", d.port, " stopped as it started");
  }
}

MetricsHttpServer::~MetricsHttpServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsHttpServer::port() const { return impl_->port; }
const std::string& MetricsHttpServer::host() const { return impl_->host; }

}  // namespace troupe::actors
