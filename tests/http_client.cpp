#include "tests/http_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "base/check.hpp"

namespace troupe::test {

int tcp_connect(const std::string& host, int port, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  TROUPE_SYSCALL(fd, "socket for ", host, ":", port);
  try {
    timeval tv{.tv_sec = timeout_s, .tv_usec = 0};
    TROUPE_SYSCALL(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), "receive timeout");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    TROUPE_CHECK(::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1, "not an IPv4 address: ", host);
    TROUPE_SYSCALL(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), "connect to ", host, ":",
                   port);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fd;
}

void http_send(int fd, const std::string& method, const std::string& host, int port, const std::string& path,
               const std::string& body, const std::string& content_type) {
  std::string request = str_cat(method, " ", path, " HTTP/1.1\r\nHost: ", host, ":", port, "\r\nConnection: close\r\n");
  if (method != "GET") request += str_cat("Content-Type: ", content_type, "\r\nContent-Length: ", body.size(), "\r\n");
  request += "\r\n" + body;
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    TROUPE_SYSCALL(n, "send the request to ", host, ":", port);
    sent += size_t(n);
  }
}

HttpResponse parse_http_head(const std::string& raw) {
  const size_t head_end = raw.size();
  TROUPE_CHECK(raw.rfind("HTTP/1.", 0) == 0 && raw.size() >= 12, "not an HTTP response: ", raw.substr(0, 80));
  HttpResponse r;
  r.status = std::stoi(raw.substr(9, 3));
  size_t line = raw.find("\r\n") + 2;
  while (line < head_end) {
    const size_t eol = raw.find("\r\n", line);
    const std::string h = raw.substr(line, eol - line);
    const size_t colon = h.find(':');
    if (colon != std::string::npos) {
      std::string name = h.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
      r.headers[name] = h.substr(h.find_first_not_of(' ', colon + 1));
    }
    line = eol + 2;
  }
  return r;
}

HttpResponse http_get(const std::string& host, int port, const std::string& path) {
  return http_request("GET", host, port, path, "");
}

HttpResponse http_request(const std::string& method, const std::string& host, int port, const std::string& path,
                          const std::string& body, int timeout_s, const std::string& content_type) {
  const int fd = tcp_connect(host, port, timeout_s);  // a hung server fails the test instead of hanging it
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  http_send(fd, method, host, port, path, body, content_type);
  std::string raw;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    TROUPE_SYSCALL(n, "read the response from ", host, ":", port);
    if (n == 0) break;
    raw.append(buf, size_t(n));
  }
  const size_t head_end = raw.find("\r\n\r\n");
  TROUPE_CHECK(raw.rfind("HTTP/1.", 0) == 0 && head_end != std::string::npos,
               "not an HTTP response: ", raw.substr(0, 80));
  HttpResponse r = parse_http_head(raw.substr(0, head_end + 2));
  r.body = raw.substr(head_end + 4);
  // The server may answer with chunked encoding; the metrics server sets Content-Length.
  TROUPE_CHECK(r.headers.count("transfer-encoding") == 0, "chunked responses are not supported by this test client");
  return r;
}

}  // namespace troupe::test
