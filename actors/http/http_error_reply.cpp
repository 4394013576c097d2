#include "actors/http/http_error_reply.hpp"

#include <nlohmann/json.hpp>

namespace troupe::actors {

HttpReply http_error_reply(int status, const std::string& message) {
  using json = nlohmann::json;
  const char* type = status == 503 ? "server_overloaded" : status >= 500 ? "server_error" : "invalid_request_error";
  const json e = {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}};
  return {status, e.dump(-1, ' ', false, json::error_handler_t::replace)};
}

}  // namespace troupe::actors
