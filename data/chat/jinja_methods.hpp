// The Python methods templates call on values: str (strip/lstrip/rstrip with chars, split and
// rsplit with sep and maxsplit, startswith/endswith with a str or tuple, upper/lower/title/
// capitalize, replace, find, count, join, partition, ...), dict (get, items, keys, values,
// copy) and list/tuple (count, index, copy). A mutating method (list.append, dict.update, ...)
// is found but refused when called, as jinja2's ImmutableSandboxedEnvironment does; a Python
// method this renderer does not implement (str.format, ...) is refused by name.
//
//   auto m = find_method(Value::string("a,b"), "split");   // bound method
//   CallArgs args{{Value::string(",")}, {}};
//   m->callable().fn(args);                                 // ['a', 'b']
#pragma once

#include <optional>
#include <string>

#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

// The bound method `obj.name`, or nullopt when Python's type has no such attribute.
std::optional<Value> find_method(const Value& obj, const std::string& name);

// Python's str.split / str.rsplit (sep nullopt: runs of whitespace; maxsplit -1: no limit).
std::vector<std::string> python_split(const std::string& text, const std::optional<std::string>& sep, int64_t maxsplit,
                                      bool from_right);
// Python's str.splitlines.
std::vector<std::string> python_splitlines(const std::string& text, bool keepends);

}  // namespace troupe::jinja
