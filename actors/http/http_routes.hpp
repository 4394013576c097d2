// The routes of one HttpServer by exact path: which route answers a method on a path, and which
// methods a path answers (the Allow header of a 405). A GET route answers HEAD as well.
//
//   HttpRoutes routes({{"GET", "/health", health}, {"POST", "/v1/completions", complete}});
//   routes.find("HEAD", "/health").route;           // the GET route
//   routes.find("POST", "/health").path_known;      // true: a 405, Allow: routes.allowed("/health")
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "actors/http/http_server.hpp"

namespace troupe::actors {

class HttpRoutes {
 public:
  // Throws naming the route when its method is not GET, POST or PUT, or a method and path come twice.
  explicit HttpRoutes(std::vector<HttpRoute> routes);

  struct Match {
    const HttpRoute* route = nullptr;  // null: no route answers this method on this path
    bool path_known = false;           // some route answers the path (405 rather than 404)
  };
  Match find(std::string_view method, std::string_view path) const;
  // The methods that `path` answers: "GET, HEAD", "POST".
  std::string allowed(std::string_view path) const;

 private:
  std::vector<HttpRoute> routes_;
};

}  // namespace troupe::actors
