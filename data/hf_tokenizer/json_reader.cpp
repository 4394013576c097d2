#include "data/hf_tokenizer/json_reader.hpp"

#include <nlohmann/json.hpp>

#include "base/check.hpp"

namespace troupe::hf {

JsonReader::JsonReader(const nlohmann::json& object, std::string where, std::string file)
    : object_(object), where_(std::move(where)), file_(std::move(file)) {
  if (!object_.is_object()) fail(str_cat("expected a JSON object, got ", object_.dump()));
}

std::string JsonReader::context() const {
  return type_.empty() ? str_cat(file_, ": ", where_) : str_cat(file_, ": ", where_, " (", type_, ")");
}

void JsonReader::fail(const std::string& message) const { TROUPE_FAIL(context(), ": ", message); }

const std::string& JsonReader::type() {
  if (type_.empty()) {
    const nlohmann::json& t = get("type");
    if (!t.is_string()) fail(str_cat("\"type\" is not a string: ", t.dump()));
    type_ = t.get<std::string>();
  }
  return type_;
}

bool JsonReader::has(std::string_view key) const {
  const auto it = object_.find(key);
  return it != object_.end() && !it->is_null();
}

const nlohmann::json& JsonReader::get(std::string_view key) {
  read_.emplace(key);
  const auto it = object_.find(key);
  if (it == object_.end()) fail(str_cat("the field \"", key, "\" is missing"));
  return *it;
}

std::string JsonReader::string(std::string_view key) {
  const nlohmann::json& v = get(key);
  if (!v.is_string()) fail(str_cat("\"", key, "\" is not a string: ", v.dump()));
  return v.get<std::string>();
}

std::optional<std::string> JsonReader::optional_string(std::string_view key) {
  read_.emplace(key);
  if (!has(key)) return std::nullopt;
  return string(key);
}

bool JsonReader::boolean(std::string_view key, std::optional<bool> fallback) {
  read_.emplace(key);
  if (!has(key) && fallback) return *fallback;
  const nlohmann::json& v = get(key);
  if (!v.is_boolean()) fail(str_cat("\"", key, "\" is not a boolean: ", v.dump()));
  return v.get<bool>();
}

int64_t JsonReader::integer(std::string_view key, std::optional<int64_t> fallback) {
  read_.emplace(key);
  if (!has(key) && fallback) return *fallback;
  const nlohmann::json& v = get(key);
  if (!v.is_number_integer()) fail(str_cat("\"", key, "\" is not an integer: ", v.dump()));
  return v.get<int64_t>();
}

const nlohmann::json& JsonReader::list(std::string_view key) {
  const nlohmann::json& v = get(key);
  if (!v.is_array()) fail(str_cat("\"", key, "\" is not a list: ", v.dump()));
  return v;
}

JsonReader::Pattern JsonReader::pattern(std::string_view key) {
  const nlohmann::json& v = get(key);
  if (v.is_object() && v.size() == 1) {
    for (const char* kind : {"String", "Regex"})
      if (v.contains(kind) && v[kind].is_string()) return {kind[0] == 'R', v[kind].get<std::string>()};
  }
  fail(str_cat("\"", key, "\" must be {\"String\": ...} or {\"Regex\": ...}, got ", v.dump()));
}

std::string JsonReader::prepend_scheme() {
  std::string scheme = optional_string("prepend_scheme").value_or("always");
  if (scheme != "always" && scheme != "first" && scheme != "never")
    fail(str_cat("prepend_scheme \"", scheme, "\" is not one of always, first, never"));
  if (has("add_prefix_space") && !boolean("add_prefix_space") && scheme != "never")
    fail("add_prefix_space false does not match prepend_scheme");
  ignore("add_prefix_space");
  return scheme;
}

void JsonReader::ignore(std::string_view key) { read_.emplace(key); }

void JsonReader::finish() const {
  for (const auto& [key, value] : object_.items())
    if (!read_.contains(key))
      fail(str_cat("the field \"", key, "\" (", value.dump(), ") is not implemented; it could change the tokens"));
}

std::string json_index(const std::string& where, size_t i) { return str_cat(where, "[", i, "]"); }

}  // namespace troupe::hf
