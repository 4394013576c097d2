#include "data/chat/jinja_error.hpp"

namespace troupe::jinja {

void fail_at(const std::string& template_name, SourcePos pos, const std::string& message) {
  throw troupe::Error(
      str_cat("chat template '", template_name, "' line ", pos.line, ", column ", pos.column, ": ", message));
}

}  // namespace troupe::jinja
