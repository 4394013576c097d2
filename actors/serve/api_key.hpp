// `troupe serve --api-key KEY` (vLLM's flag): every /v1/* request must carry
// `Authorization: Bearer KEY`, else 401 with OpenAI's error shape. Other paths (/health,
// /metrics, PUT /api) stay open, as vLLM's.
//
//   HttpServerOptions o;  o.admit = api_key_check("secret");
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "actors/http/http_server.hpp"

namespace troupe::actors {

// The admit hook for HttpServerOptions (an empty key: every request admitted).
std::function<std::optional<HttpReply>(const HttpRequest&)> api_key_check(std::string key);

}  // namespace troupe::actors
