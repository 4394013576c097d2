// A plain-socket HTTP/1.1 GET for tests of the monitor's metrics server: deliberately not the
// library the server uses, so a protocol slip on either side shows.
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

}  // namespace troupe::test
