#include "actors/serve/api_key.hpp"

#include "actors/serve/api_request.hpp"

namespace troupe::actors {

std::function<std::optional<HttpReply>(const HttpRequest&)> api_key_check(std::string key) {
  if (key.empty()) return {};
  return [expected = "Bearer " + key](const HttpRequest& r) -> std::optional<HttpReply> {
    if (r.path.rfind("/v1/", 0) != 0 || r.header("Authorization") == expected) return std::nullopt;
    HttpReply reply = error_reply(401, "Unauthorized: send the server's --api-key as 'Authorization: Bearer KEY'", "");
    reply.headers.emplace_back("WWW-Authenticate", "Bearer");
    return reply;
  };
}

}  // namespace troupe::actors
