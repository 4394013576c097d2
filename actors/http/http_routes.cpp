#include "actors/http/http_routes.hpp"

#include "base/check.hpp"

namespace troupe::actors {

HttpRoutes::HttpRoutes(std::vector<HttpRoute> routes) : routes_(std::move(routes)) {
  for (size_t i = 0; i < routes_.size(); ++i) {
    const HttpRoute& r = routes_[i];
    TROUPE_CHECK(r.method == "GET" || r.method == "POST" || r.method == "PUT", "HttpServer: unknown method ", r.method,
                 " for ", r.path, " (GET, POST or PUT)");
    TROUPE_CHECK(r.handler || r.handle, "HttpServer: the route ", r.method, " ", r.path, " has no handler");
    for (size_t j = 0; j < i; ++j)
      TROUPE_CHECK(routes_[j].method != r.method || routes_[j].path != r.path, "HttpServer: the route ", r.method, " ",
                   r.path, " is given twice");
  }
}

HttpRoutes::Match HttpRoutes::find(std::string_view method, std::string_view path) const {
  Match m;
  const std::string_view wanted = method == "HEAD" ? "GET" : method;
  for (const HttpRoute& r : routes_) {
    if (r.path != path) continue;
    m.path_known = true;
    if (r.method == wanted) m.route = &r;
  }
  return m;
}

std::string HttpRoutes::allowed(std::string_view path) const {
  std::string out;
  for (const HttpRoute& r : routes_) {
    if (r.path != path) continue;
    out += (out.empty() ? "" : ", ") + r.method;
    if (r.method == "GET") out += ", HEAD";
  }
  return out;
}

}  // namespace troupe::actors
