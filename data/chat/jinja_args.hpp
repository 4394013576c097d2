// Binds call arguments to a Python-style signature, for the builtin filters, tests, methods
// and functions: positional then keyword arguments, defaults for the rest, and Python's errors
// for too many, unknown or repeated arguments.
//
//   ArgBinder a(args, "str.split", {"sep", "maxsplit"});
//   Value sep = a.get(0, Value::none());
//   int64_t maxsplit = a.get_int(1, -1);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

class ArgBinder {
 public:
  // Throws JinjaError naming `what` when the arguments do not fit `params` or fewer than
  // `required` are given.
  ArgBinder(const CallArgs& args, std::string what, std::vector<std::string> params, size_t required = 0);

  bool has(size_t i) const { return values_[i].has_value(); }
  // The argument, or `fallback` when it was not given.
  Value get(size_t i, Value fallback = Value()) const;
  int64_t get_int(size_t i, int64_t fallback) const;
  bool get_bool(size_t i, bool fallback) const;
  // A str argument (throws when given and not a str), or `fallback`.
  std::optional<std::string> get_string(size_t i) const;
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  std::vector<std::string> params_;
  std::vector<std::optional<Value>> values_;
};

}  // namespace troupe::jinja
