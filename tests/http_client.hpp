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
// The same for any method, with a JSON body (Content-Length set) unless the method is GET.
HttpResponse http_request(const std::string& method, const std::string& host, int port, const std::string& path,
                          const std::string& body);

}  // namespace troupe::test
