// Reading the JSON body of an HTTP API call (actors/serve/completion_api.hpp) and answering a bad
// one: every check names the field at fault, and ApiError becomes a JSON error reply with
// OpenAI's shape, {"error": {"message", "type", "param", "code"}}.
//
//   const json j = parse_body(body);                       // 400 unless a JSON object
//   require_known_fields(j, {"prompt", "max_tokens"});     // 400 naming an unknown field
//   int64_t n = number<int64_t>(j, "max_tokens", 16, 1, 4096);
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "actors/http/http_server.hpp"
#include "base/check.hpp"

namespace troupe::actors {

// A call the server refuses: HTTP `status` with `message`; `param` names the field ("" none).
struct ApiError : std::runtime_error {
  ApiError(int status, std::string param, const std::string& message)
      : std::runtime_error(message), status(status), param(std::move(param)) {}
  int status;
  std::string param;
};

template <typename... Args>
void require(bool ok, const char* param, const Args&... args) {
  if (!ok) throw ApiError(400, param, str_cat(args...));
}

// The body as a JSON object (400 otherwise).
nlohmann::json parse_body(const std::string& body);
// 400 naming the first field of `j` that is not in `known`.
void require_known_fields(const nlohmann::json& j, std::initializer_list<const char*> known);

// A number field within [lo, hi] (`fallback` when absent or null).
template <typename T>
T number(const nlohmann::json& j, const char* key, T fallback, double lo, double hi) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  const nlohmann::json& v = j.at(key);
  if constexpr (std::is_integral_v<T>)
    require(v.is_number_integer(), key, "'", key, "' must be an integer");
  else
    require(v.is_number(), key, "'", key, "' must be a number");
  // The range is checked on the value as sent, before it is narrowed to T (no wrap-around).
  const double sent = v.get<double>();
  require(sent >= lo && sent <= hi, key, "'", key, "' must be in [", lo, ", ", hi, "], got ", v.dump());
  return v.get<T>();
}
// A boolean field (false when absent or null).
bool flag(const nlohmann::json& j, const char* key);
// A string or a list of strings, as a list (empty when absent or null).
std::vector<std::string> strings(const nlohmann::json& j, const char* key);

// JSON text; bytes that are not UTF-8 (a token can end mid-character) become U+FFFD.
std::string dump_json(const nlohmann::json& j);
// {"error": {...}} with `status`.
HttpReply error_reply(int status, const std::string& message, const std::string& param);
// Runs `f`; an ApiError, a PoolFull (503) or a JSON type error (400) becomes its error reply.
HttpReply answer_or_error(const std::function<HttpReply()>& f);

}  // namespace troupe::actors
