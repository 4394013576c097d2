#include <strings.h>

#include "actors/http/http_server.hpp"

namespace troupe::actors {

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key.size() == name.size() && ::strncasecmp(key.data(), name.data(), name.size()) == 0) return value;
  return "";
}

}  // namespace troupe::actors
