// A plain-socket client for server-sent events over HTTP/1.1 chunked encoding (`troupe serve`
// with "stream": true): reads the answer event by event, so a test can also leave mid-stream.
//
//   SseClient c("127.0.0.1", port, "/v1/completions", R"({"prompt": "Hi", "stream": true})");
//   while (auto data = c.next()) { ... *data is one event's payload, "[DONE]" last ... }
//   c.close();   // or the destructor: the server sees the client leave
#pragma once

#include <optional>
#include <string>

#include "tests/http_client.hpp"

namespace troupe::test {

class SseClient {
 public:
  // Connects, POSTs `body` and reads the status line and headers; throws troupe::Error when it
  // cannot. Reads time out after `timeout_s` (a test failure, not a hang).
  SseClient(const std::string& host, int port, const std::string& path, const std::string& body, int timeout_s = 20);
  ~SseClient();
  SseClient(const SseClient&) = delete;
  SseClient& operator=(const SseClient&) = delete;

  const HttpResponse& head() const { return head_; }  // status and headers (body empty)
  // The next event's `data:` payload; nullopt once the server has ended the reply. A reply that
  // is not streamed (an error) has no events: its body is then in head().body.
  std::optional<std::string> next();
  void close();

 private:
  bool fill();                              // reads more bytes; false at the end of the connection
  std::optional<std::string> next_chunk();  // the next chunk of the chunked body

  int fd_ = -1;
  std::string raw_;     // bytes read and not yet consumed
  std::string events_;  // de-chunked body not yet split into events
  HttpResponse head_;
  bool chunked_ = false, ended_ = false;
};

}  // namespace troupe::test
