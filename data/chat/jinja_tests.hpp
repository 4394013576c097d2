// Jinja's builtin tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...) with Python
// Jinja 3.1's behaviour: a bool is a number and an integer is not a float; a str, list, tuple,
// dict and Undefined are sequences; an iterator (the result of |map, |select) is iterable but
// not a sequence. `sameas` is supported for none, true and false only.
//
//   apply_test("divisibleby", Value::integer(9), CallArgs{{Value::integer(3)}, {}})  // true
#pragma once

#include <string>
#include <string_view>

#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

using TestFn = bool (*)(const Value& value, const CallArgs& args);

const TestFn* find_test(std::string_view name);
bool is_unsupported_test(std::string_view name);
// Throws JinjaError for an unknown test or a failure inside it.
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);

}  // namespace troupe::jinja
