#include "actors/serve/api_request.hpp"

#include "actors/serve/inference_pool.hpp"

namespace troupe::actors {

using json = nlohmann::json;

json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  require(!j.is_discarded(), "", "the request body is not valid JSON");
  require(j.is_object(), "", "the request body must be a JSON object");
  return j;
}

void require_known_fields(const json& j, std::initializer_list<const char*> known) {
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    require(ok, key.c_str(), "unknown field '", key, "'");
  }
}

bool flag(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return false;
  require(j.at(key).is_boolean(), key, "'", key, "' must be true or false");
  return j.at(key).get<bool>();
}

std::vector<std::string> strings(const json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.contains(key) || j.at(key).is_null()) return out;
  const json& v = j.at(key);
  if (v.is_string()) return {v.get<std::string>()};
  require(v.is_array(), key, "'", key, "' must be a string or a list of strings");
  for (const json& s : v) {
    require(s.is_string(), key, "'", key, "' must be a string or a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpReply error_reply(int status, const std::string& message, const std::string& param) {
  // OpenAI's types: a refused request (400), an unknown model (404) or a missing key (401) is
  // an "invalid_request_error".
  const char* type = status == 503                                     ? "server_overloaded"
                     : status == 400 || status == 404 || status == 401 ? "invalid_request_error"
                                                                       : "server_error";
  const json e = {{"error",
                   {{"message", message},
                    {"type", type},
                    {"param", param.empty() ? json(nullptr) : json(param)},
                    {"code", status}}}};
  return {status, dump_json(e)};
}

HttpReply answer_or_error(const std::function<HttpReply()>& f) {
  try {
    return f();
  } catch (const ApiError& e) {
    return error_reply(e.status, e.what(), e.param);
  } catch (const PoolFull& e) {
    return error_reply(503, e.what(), "");
  } catch (const json::exception& e) {
    return error_reply(400, str_cat("bad request: ", e.what()), "");
  }
}

}  // namespace troupe::actors
