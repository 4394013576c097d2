// Python's str() and repr() of template values: what {{ x }}, `~` and |string produce.
//
//   to_str(Value::floating(1.0)) == "1.0"        to_str(Value::none()) == "None"
//   to_str(list of 'a', 1e16) == "['a', 1e+16]"   to_str(undefined) == ""
//   float_repr(1e-05) == "1e-05"                  html_escape("<a>") == "&lt;a&gt;"
#pragma once

#include <string>
#include <string_view>

#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

// str(x). Throws JinjaError for what would print a Python object address (functions,
// iterators, the loop object), since that output cannot be reproduced.
std::string to_str(const Value& v);
// repr(x), as str() of a container shows its items.
std::string to_repr(const Value& v);
// repr() of a float: the shortest digits that read back to it, fixed notation for
// 1e-4 <= |x| < 1e16 (with ".0" when integral), exponent notation with two digits otherwise.
std::string float_repr(double x);
// markupsafe.escape of text: & < > " ' as HTML entities.
std::string html_escape(std::string_view text);

}  // namespace troupe::jinja
