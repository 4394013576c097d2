// A raw TCP connection to an HTTP server for the tests of actors/http: send any bytes (a header
// line at a time, a pipelined pair of requests), read one answer of a kept-alive connection, and
// tell when the server has closed it.
//
//   RawHttpConnection c(port);
//   c.send("GET /ping HTTP/1.1\r\nHost: t\r\n\r\n");
//   test::HttpResponse r = c.read_response();        // r.status, r.headers, r.body
//   EXPECT_TRUE(c.closed_within(std::chrono::seconds(5)));
#pragma once

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <string_view>

#include "base/check.hpp"
#include "tests/http_client.hpp"

namespace troupe::test {

class RawHttpConnection {
 public:
  explicit RawHttpConnection(int port, int timeout_s = 20) : fd_(tcp_connect("127.0.0.1", port, timeout_s)) {}
  ~RawHttpConnection() { close(); }
  RawHttpConnection(const RawHttpConnection&) = delete;
  RawHttpConnection& operator=(const RawHttpConnection&) = delete;

  // False once the server has closed the connection (the send fails).
  bool send(std::string_view bytes) {
    for (size_t sent = 0; sent < bytes.size();) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += size_t(n);
    }
    return true;
  }

  // One answer: its head, then a Content-Length body (or, without one, up to the server's close).
  HttpResponse read_response() {
    size_t head_end;
    while ((head_end = raw_.find("\r\n\r\n")) == std::string::npos)
      TROUPE_CHECK(fill(), "the server closed the connection before an answer's headers: ", raw_.substr(0, 80));
    HttpResponse r = parse_http_head(raw_.substr(0, head_end + 2));
    raw_.erase(0, head_end + 4);
    if (r.status / 100 == 1 || r.status == 204 || r.status == 304) return r;  // never a body
    auto length = r.headers.find("content-length");
    if (length == r.headers.end()) {
      while (fill()) {}
      r.body.swap(raw_);
      return r;
    }
    const size_t n = std::stoul(length->second);
    while (raw_.size() < n) TROUPE_CHECK(fill(), "the server closed the connection inside a body");
    r.body = raw_.substr(0, n);
    raw_.erase(0, n);
    return r;
  }

  // Every byte up to the server's close.
  std::string read_to_end() {
    while (fill()) {}
    std::string out;
    out.swap(raw_);
    return out;
  }

  // Whether the server closes the connection (end of stream or reset) within `limit`; bytes it
  // sends meanwhile are kept.
  bool closed_within(std::chrono::milliseconds limit) {
    for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
      if (n > 0)
        raw_.append(buf, size_t(n));
      else
        ::usleep(10'000);
    }
    return false;
  }

  // Bytes read and not yet consumed (closed_within keeps what arrives).
  size_t pending_bytes() const { return raw_.size(); }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  bool fill() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    TROUPE_SYSCALL(n, "read from the server");
    raw_.append(buf, size_t(n));
    return n > 0;
  }

  int fd_;
  std::string raw_;  // read and not yet consumed
};

}  // namespace troupe::test
