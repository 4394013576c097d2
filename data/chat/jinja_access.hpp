// Attribute and item access as jinja2's sandboxed environment does it:
//   obj.name  -> the Python attribute (a method: d.items, s.strip) first, then obj['name'];
//   obj[key]  -> the item first, then, for a str key, the attribute;
// and anything missing is an Undefined (which fails only when used further). Access on an
// Undefined fails at once ("'x' is undefined"), as Jinja's default Undefined does.
//
//   get_attr(message, "content")            // message['content'], or Undefined
//   get_item(list, Value::integer(-1))      // the last item
//   get_slice(list, none, none, integer(-1))  // reversed copy
#pragma once

#include <string>

#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; a missing part is an Undefined or None.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

}  // namespace troupe::jinja
