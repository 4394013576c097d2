// A plain-socket HTTP/1.1 client for tests of our HTTP servers (the monitor's metrics, `troupe
// serve`): deliberately not the library the servers use, so a protocol slip on either side shows.
//
//   HttpResponse r = http_get("127.0.0.1", port, "/metrics");   // r.status == 200, r.body
#pragma once

#include <map>
#include <string>

namespace troupe::test {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// Sends "GET path HTTP/1.1" with Connection: close and reads until the server closes.
// Throws troupe::Error when it cannot connect or the answer is not HTTP.
HttpResponse http_get(const std::string& host, int port, const std::string& path);
// The same for any method, with a JSON body (Content-Length set) unless the method is GET;
// reading the answer fails after `timeout_s` of silence.
// `content_type`: curl's `-d` sends application/x-www-form-urlencoded.
HttpResponse http_request(const std::string& method, const std::string& host, int port, const std::string& path,
                          const std::string& body, int timeout_s = 10,
                          const std::string& content_type = "application/json");

// The pieces of http_request, for clients that read the answer as it comes (tests/sse_client.hpp):
// a connected socket whose reads time out after `timeout_s`, and the whole request sent on it.
// The status line and headers of `head` (up to the blank line, each line ending in CRLF).
HttpResponse parse_http_head(const std::string& head);
int tcp_connect(const std::string& host, int port, int timeout_s);
void http_send(int fd, const std::string& method, const std::string& host, int port, const std::string& path,
               const std::string& body, const std::string& content_type = "application/json");

}  // namespace troupe::test
