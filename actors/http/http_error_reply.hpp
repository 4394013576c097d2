// The errors the HTTP server answers itself (no such route, a method the path does not answer, a
// body or headers too large, a malformed request, a handler that threw) as JSON in OpenAI's
// shape, like the APIs' own errors (actors/serve/api_request.hpp):
// {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": 404}}.
//
//   HttpReply r = http_error_reply(404, "no route GET /v2/models");
#pragma once

#include <string>

#include "actors/http/http_server.hpp"

namespace troupe::actors {

HttpReply http_error_reply(int status, const std::string& message);

}  // namespace troupe::actors
