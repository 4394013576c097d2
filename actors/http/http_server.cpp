#include "actors/http/http_server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

// cpp-httplib (a compiled library on Debian, its limits built in) refuses form-encoded bodies
// over 8 KiB with an empty 413, and curl's -d sends JSON as form-encoded: a legitimate call with
// many prompts was refused. Handlers read the body themselves (a content reader), whatever its
// type, up to kMaxBodyBytes; a longer one gets a JSON 413 saying so.
constexpr size_t kMaxBodyBytes = size_t(64) << 20;

void too_long(httplib::Response& res) {
  res.status = 413;
  res.set_content(str_cat(R"({"error": {"message": "the request body is over )", kMaxBodyBytes >> 20,
                          R"( MiB", "type": "invalid_request_error", "param": null, "code": 413}})"),
                  "application/json");
}

}  // namespace

struct HttpServer::Impl {
  httplib::Server server;
  int port = 0;
  std::thread thread;
  std::atomic<bool> finished{false};  // listen_after_bind returned
};

namespace {

// cpp-httplib matches route patterns as regular expressions: escape the path so it is exact.
std::string exact_pattern(const std::string& path) {
  std::string pattern;
  for (char c : path) {
    if (std::strchr(".^$|()[]{}*+?\\", c) != nullptr) pattern += '\\';
    pattern += c;
  }
  return pattern;
}

}  // namespace

HttpServer::HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes, int threads,
                       const std::string& flag_prefix)
    : impl_(std::make_unique<Impl>()) {
  const std::string dash = flag_prefix.empty() ? "--" : "--" + flag_prefix + "-";
  const std::string what = flag_prefix.empty() ? "" : flag_prefix + " ";
  TROUPE_CHECK(port >= 0 && port <= 65535, dash, "port must be in [0, 65535], got ", port);
  Impl& d = *impl_;
  httplib::Server& s = d.server;
  s.set_payload_max_length(kMaxBodyBytes);
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 413 && res.body.empty()) too_long(res);
  });
  s.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(std::max(threads, 1))); };
  int listen_fd = -1;   // the socket the server binds (the last one it configures)
  int sockopt_err = 0;  // errno of a failed setsockopt (checked after the bind)
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which would let a second server
  // share the port silently instead of failing.
  s.set_socket_options([&listen_fd, &sockopt_err](int sock) {
    const int yes = 1;
    if (::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes)) != 0) sockopt_err = errno;
    listen_fd = sock;
  });
  for (HttpRoute& r : routes) {
    auto answer = [h = std::move(r.handler)](const std::string& body, httplib::Response& res) {
      HttpReply reply;
      try {
        reply = h(body);
      } catch (const std::exception& e) {
        reply = {500, e.what(), "text/plain"};
      }
      res.status = reply.status;
      if (!reply.stream) {
        res.set_content(reply.body, reply.content_type);
        return;
      }
      res.set_chunked_content_provider(reply.content_type,
                                       [stream = std::move(reply.stream)](size_t, httplib::DataSink& sink) {
                                         stream([&sink](std::string_view s) { return sink.write(s.data(), s.size()); });
                                         sink.done();
                                         return true;
                                       });
    };
    auto with_body = [answer](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& read) {
      std::string body;
      bool over = false;
      read([&](const char* data, size_t n) {
        over = body.size() + n > kMaxBodyBytes;
        if (!over) body.append(data, n);
        return !over;
      });
      if (over) return too_long(res);
      answer(body, res);
    };
    const std::string pattern = exact_pattern(r.path);
    if (r.method == "GET")
      s.Get(pattern, [answer](const httplib::Request&, httplib::Response& res) { answer("", res); });
    else if (r.method == "POST")
      s.Post(pattern, with_body);
    else if (r.method == "PUT")
      s.Put(pattern, with_body);
    else
      TROUPE_FAIL("HttpServer: unknown method ", r.method, " for ", r.path);
  }
  errno = 0;
  const bool bound = port == 0 ? (d.port = s.bind_to_any_port(host)) > 0 : s.bind_to_port(host, d.port = port);
  const int err = errno;
  TROUPE_CHECK(bound, "cannot serve ", what, "on ", host, ":", port, " (", dash, "host/", dash,
               "port): ", err != 0 ? std::strerror(err) : "bind failed",
               " (is another process using that port, or is the address not this machine's?)");
  TROUPE_CHECK(sockopt_err == 0, "setsockopt(SO_REUSEADDR) for ", host, ":", d.port, ": ", std::strerror(sockopt_err));
  // cpp-httplib listens with a backlog of 5: a burst of clients would find connections reset.
  // Listening again on the bound socket raises it (Linux updates the backlog in place).
  TROUPE_SYSCALL(::listen(listen_fd, SOMAXCONN), "listen on ", host, ":", d.port, " with a longer backlog");
  d.thread = std::thread([&d] {
    d.server.listen_after_bind();
    d.finished = true;
  });
  while (!s.is_running() && !d.finished) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!s.is_running()) {
    d.thread.join();
    TROUPE_FAIL("the ", what, "server on ", host, ":", d.port, " stopped as it started");
  }
}

HttpServer::~HttpServer() {
  stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::wait() {
  while (!impl_->finished) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace troupe::actors
