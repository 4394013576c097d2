// Jinja's builtin filters with Python Jinja 3.1's behaviour, and transformers' `tojson`
// (json.dumps without HTML escaping, with ensure_ascii/indent/separators/sort_keys).
// Supported: abs attribute-less map/select/reject, capitalize, center, count, d/default,
// dictsort, e/escape, first, float, forceescape, indent, int, items, join, last, length, list,
// lower, map, max, min, reject, rejectattr, replace, reverse, round, safe, select, selectattr,
// sort, string, sum, title, tojson, trim, unique, upper. Jinja's other builtins (batch,
// format, groupby, truncate, wordwrap, ...) are refused by name when a template is parsed.
//
//   CallArgs args{{Value::string(", ")}, {}};
//   apply_filter("join", list_of_a_b, args)   // "a, b"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

using FilterFn = Value (*)(const Value& input, const CallArgs& args);

// The filter, or nullptr when this renderer has none of that name.
const FilterFn* find_filter(std::string_view name);
// Whether `name` is one of Jinja's builtin filters this renderer does not implement.
bool is_unsupported_filter(std::string_view name);
// Throws JinjaError for an unknown filter or a failure inside it.
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);

// Python's int(str) / float(str) (surrounding whitespace, sign, "_" between digits, "inf",
// "nan"); nullopt where Python raises ValueError.
std::optional<int64_t> parse_python_int(std::string_view text);
std::optional<double> parse_python_float(std::string_view text);

}  // namespace troupe::jinja
