// JSON in and out of templates. from_json turns request data (messages, tools) into values
// with object keys in their order; to_json is transformers' `tojson` filter, Python's
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
//
//   {"a": [1, 2.0, "é"]}        -> {"a": [1, 2.0, "é"]}            (", " and ": ")
//   the same with indent=2      -> "{\n  \"a\": [\n    1,\n ..."      ("," and ": ")
//   ensure_ascii=true           -> "\u00e9", surrogate pairs above U+FFFF
#pragma once

#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

// Throws JinjaError for an integer beyond int64 (Python would keep it exact).
Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;                              // None, or the indent unit
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key) separators
  bool sort_keys = false;
};

// json.dumps; throws JinjaError naming the type Python cannot serialize ("Object of type
// Undefined is not JSON serializable").
std::string to_json(const Value& v, const JsonDumpOptions& options);

}  // namespace troupe::jinja
