#include "tests/sse_client.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include "base/check.hpp"

namespace troupe::test {

SseClient::SseClient(const std::string& host, int port, const std::string& path, const std::string& body, int timeout_s)
    : fd_(tcp_connect(host, port, timeout_s)) {
  try {
    http_send(fd_, "POST", host, port, path, body);
    size_t head_end;
    while ((head_end = raw_.find("\r\n\r\n")) == std::string::npos)
      TROUPE_CHECK(fill(), "the server closed the connection before its headers");
    head_ = parse_http_head(raw_.substr(0, head_end + 2));
    raw_.erase(0, head_end + 4);
    auto te = head_.headers.find("transfer-encoding");
    chunked_ = te != head_.headers.end() && te->second.find("chunked") != std::string::npos;
    if (!chunked_) {  // a whole reply: read it to the end
      while (fill()) {}
      head_.body = raw_;
      ended_ = true;
    }
  } catch (...) {
    close();
    throw;
  }
}

SseClient::~SseClient() { close(); }

void SseClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool SseClient::fill() {
  char buf[4096];
  const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
  TROUPE_SYSCALL(n, "read the streamed reply");
  raw_.append(buf, size_t(n));
  return n > 0;
}

std::optional<std::string> SseClient::next_chunk() {
  for (;;) {
    const size_t eol = raw_.find("\r\n");
    if (eol != std::string::npos) {
      const size_t size = std::stoul(raw_.substr(0, eol), nullptr, 16);
      if (size == 0) return std::nullopt;  // the last chunk
      if (raw_.size() >= eol + 2 + size + 2) {
        std::string data = raw_.substr(eol + 2, size);
        raw_.erase(0, eol + 2 + size + 2);
        return data;
      }
    }
    if (!fill()) return std::nullopt;
  }
}

std::optional<std::string> SseClient::next() {
  for (;;) {
    const size_t end = events_.find("\n\n");
    if (end != std::string::npos) {
      std::string event = events_.substr(0, end);
      events_.erase(0, end + 2);
      TROUPE_CHECK(event.rfind("data: ", 0) == 0, "not a server-sent data event: ", event.substr(0, 80));
      return event.substr(6);
    }
    if (ended_ || fd_ < 0) return std::nullopt;
    std::optional<std::string> chunk = next_chunk();
    if (!chunk) {
      ended_ = true;
      TROUPE_CHECK(events_.empty(), "the stream ended inside an event: ", events_.substr(0, 80));
      return std::nullopt;
    }
    events_ += *chunk;
  }
}

}  // namespace troupe::test
