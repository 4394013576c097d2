// The global functions a chat template can call: Jinja's range, dict and namespace, and the
// two transformers adds, raise_exception(message) (throws TemplateRaised with the message) and
// strftime_now(format) (the local time, as datetime.now().strftime). Jinja's lipsum, cycler
// and joiner are refused when called.
#pragma once

#include <optional>
#include <string>

#include "data/chat/jinja_value.hpp"

namespace troupe::jinja {

// The global `name`, or nullopt.
std::optional<Value> find_global(const std::string& name);

// Python's datetime.now().strftime(format) for a naive local datetime (%z and %Z are empty,
// %f is microseconds).
std::string strftime_now(const std::string& format);

}  // namespace troupe::jinja
