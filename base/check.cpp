#include "base/check.hpp"

#include <cerrno>
#include <cstring>

namespace troupe {

void fail(const char* kind, const char* expr, const char* file, int line, const std::string& hint) {
  const char* sep = hint.empty() ? "" : " ";
  if (expr && *expr) throw Error(str_cat(hint, sep, "[", kind, " `", expr, "` failed at ", file, ":", line, "]"));
  throw Error(str_cat(hint, sep, "[at ", file, ":", line, "]"));
}

void fail_errno(const char* expr, const char* file, int line, const std::string& hint) {
  const int err = errno;
  fail("system call", expr, file, line, str_cat(hint, hint.empty() ? "" : ": ", std::strerror(err)));
}

}  // namespace troupe
