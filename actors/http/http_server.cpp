#include "actors/http/http_server.hpp"

#include <sys/resource.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "actors/http/http_routes.hpp"
#include "actors/http/http_session.hpp"
#include "actors/http/http_worker_pool.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr int kSpareFiles = 256;  // open files the rest of the process may need beside the connections
constexpr std::chrono::milliseconds kAcceptRetry{100};

// Each connection is a file: raise the soft open-file limit towards what `wanted` connections
// need (the hard limit caps it); the connections the limit allows.
int connections_the_file_limit_allows(int wanted) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return wanted;
  const rlim_t need = rlim_t(wanted) + kSpareFiles;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : std::min(need, rl.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return wanted;
  return std::max(16, int(rl.rlim_cur) - kSpareFiles);
}

}  // namespace

struct HttpServer::Impl {
  Impl(std::vector<HttpRoute> r, HttpServerOptions o)
      : options(std::move(o)),
        routes(std::move(r)),
        log(logger(options.log_role)),
        accept_strand(net::make_strand(io)),
        acceptor(accept_strand),
        retry_timer(accept_strand),
        shutdown_timer(accept_strand),
        workers(options.threads),
        context{options, routes, workers, log, [this](HttpSession* s) { on_closed(s); }} {}

  void bind(const std::string& host, int port);
  void accept();
  void on_accept(const boost::system::error_code& ec, tcp::socket socket);
  void on_closed(HttpSession* s);
  void stop();
  void close_all();
  bool stopped() const { return stopping && sessions.empty(); }  // under mu
  std::vector<std::shared_ptr<HttpSession>> live_sessions();

  const HttpServerOptions options;
  const HttpRoutes routes;
  const Logger& log;
  net::io_context io{1};
  net::strand<net::io_context::executor_type> accept_strand;  // the acceptor and the timers
  tcp::acceptor acceptor;
  net::steady_timer retry_timer;     // after a failed accept (out of files)
  net::steady_timer shutdown_timer;  // stop()'s deadline
  HttpWorkerPool workers;
  HttpConnectionContext context;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::thread io_thread;
  int port = 0;
  int max_connections = 0;
  std::chrono::steady_clock::time_point last_accept_warning;

  mutable std::mutex mu;
  std::condition_variable cv;  // stopped()
  std::unordered_map<HttpSession*, std::weak_ptr<HttpSession>> sessions;
  bool accept_paused = false;  // at max_connections
  bool stopping = false;
};

void HttpServer::Impl::bind(const std::string& host, int requested_port) {
  const std::string& prefix = options.flag_prefix;
  const std::string dash = prefix.empty() ? "--" : "--" + prefix + "-";
  const std::string what = prefix.empty() ? "" : prefix + " ";
  TROUPE_CHECK(requested_port >= 0 && requested_port <= 65535, dash, "port must be in [0, 65535], got ",
               requested_port);
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, std::to_string(requested_port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  // SO_REUSEADDR only: SO_REUSEPORT would let a second server share the port silently.
  for (const auto& e : endpoints) {
    acceptor.close(ec);
    if (acceptor.open(e.endpoint().protocol(), ec)) continue;
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (ec || acceptor.bind(e.endpoint(), ec) || acceptor.listen(net::socket_base::max_listen_connections, ec))
      continue;
    port = acceptor.local_endpoint().port();
    return;
  }
  TROUPE_FAIL("cannot serve ", what, "on ", host, ":", requested_port, " (", dash, "host/", dash,
              "port): ", ec ? ec.message() : "no such address",
              " (is another process using that port, or is the address not this machine's?)");
}

void HttpServer::Impl::accept() {  // on accept_strand
  {
    std::lock_guard lock(mu);
    if (stopping) return;
    if (int(sessions.size()) >= max_connections) {
      accept_paused = true;  // the next connection waits in the listen queue until one closes
      return;
    }
  }
  acceptor.async_accept(net::make_strand(io), [this](const boost::system::error_code& ec, tcp::socket socket) {
    on_accept(ec, std::move(socket));
  });
}

void HttpServer::Impl::on_accept(const boost::system::error_code& ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted) return;  // stop() closed the acceptor
  if (ec) {                                         // out of files, most likely: wait for some to close
    const auto now = std::chrono::steady_clock::now();
    if (now - last_accept_warning > std::chrono::seconds(10)) {
      last_accept_warning = now;
      size_t open = 0;
      {
        std::lock_guard lock(mu);
        open = sessions.size();
      }
      log.warning("cannot accept connections on port ", port, ": ", ec.message(), " (", open, " open; retrying)");
    }
    retry_timer.expires_after(kAcceptRetry);
    retry_timer.async_wait([this](const boost::system::error_code& e) {
      if (!e) accept();
    });
    return;
  }
  std::shared_ptr<HttpSession> s;
  {
    std::lock_guard lock(mu);
    if (stopping) return;  // `socket` closes as it goes
    s = std::make_shared<HttpSession>(std::move(socket), context);
    sessions.emplace(s.get(), s);
  }
  s->start();
  accept();
}

void HttpServer::Impl::on_closed(HttpSession* s) {  // any thread, as the session is destroyed
  bool resume = false;
  {
    std::lock_guard lock(mu);
    sessions.erase(s);
    resume = accept_paused && !stopping;
    if (resume) accept_paused = false;
    if (stopped()) cv.notify_all();
  }
  if (resume) net::post(accept_strand, [this] { accept(); });
}

std::vector<std::shared_ptr<HttpSession>> HttpServer::Impl::live_sessions() {
  std::vector<std::shared_ptr<HttpSession>> out;
  std::lock_guard lock(mu);
  for (auto& [raw, weak] : sessions)
    if (std::shared_ptr<HttpSession> s = weak.lock()) out.push_back(std::move(s));
  return out;  // released outside the lock: a last reference destroys its session, which locks mu
}

void HttpServer::Impl::stop() {
  {
    std::lock_guard lock(mu);
    if (stopping) return;
    stopping = true;
    if (stopped()) cv.notify_all();
  }
  context.draining = true;
  net::post(accept_strand, [this] {
    boost::system::error_code ec;
    acceptor.close(ec);
    retry_timer.cancel();
    shutdown_timer.expires_after(options.shutdown_timeout);
    shutdown_timer.async_wait([this](const boost::system::error_code& e) {
      if (e) return;  // cancelled: stop_now(), or the server is gone
      const int left = context.requests_in_flight;
      if (left > 0)
        log.warning("closing ", left, " request", left == 1 ? "" : "s", " still in flight after the shutdown timeout (",
                    options.shutdown_timeout.count() / 1000.0, " s)");
      close_all();
    });
  });
  for (const std::shared_ptr<HttpSession>& s : live_sessions()) s->drain();
  const int in_flight = context.requests_in_flight;
  if (in_flight > 0)
    log.info("draining ", in_flight, " request", in_flight == 1 ? "" : "s", " in flight (up to ",
             options.shutdown_timeout.count() / 1000.0, " s)");
}

void HttpServer::Impl::close_all() {
  for (const std::shared_ptr<HttpSession>& s : live_sessions()) s->close_now();
}

HttpServer::HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(routes), std::move(options))) {
  Impl& d = *impl_;
  d.bind(host, port);
  d.max_connections = connections_the_file_limit_allows(std::max(d.options.max_connections, 1));
  if (d.max_connections < d.options.max_connections)
    d.log.warning("at most ", d.max_connections, " connections instead of ", d.options.max_connections,
                  ": the open-file limit (ulimit -n) allows no more");
  d.work.emplace(net::make_work_guard(d.io));
  d.io_thread = std::thread([&d] { d.io.run(); });
  net::post(d.accept_strand, [&d] { d.accept(); });
}

HttpServer::HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes, int threads,
                       const std::string& flag_prefix)
    : HttpServer(host, port, std::move(routes), HttpServerOptions{.threads = threads, .flag_prefix = flag_prefix}) {}

HttpServer::~HttpServer() {
  Impl& d = *impl_;
  stop();
  wait();
  d.workers.join();
  net::post(d.accept_strand, [&d] {
    d.shutdown_timer.cancel();
    d.retry_timer.cancel();
  });
  d.work.reset();
  if (d.io_thread.joinable()) d.io_thread.join();
}

int HttpServer::port() const { return impl_->port; }

int HttpServer::connections() const {
  std::lock_guard lock(impl_->mu);
  return int(impl_->sessions.size());
}

int HttpServer::requests_in_flight() const { return impl_->context.requests_in_flight; }

void HttpServer::stop() { impl_->stop(); }

void HttpServer::stop_now() {
  impl_->stop();
  net::post(impl_->accept_strand, [&d = *impl_] { d.shutdown_timer.cancel(); });
  impl_->close_all();
}

void HttpServer::wait() {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [this] { return impl_->stopped(); });
}

bool HttpServer::wait_for(std::chrono::milliseconds limit) {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, limit, [this] { return impl_->stopped(); });
}

}  // namespace troupe::actors
