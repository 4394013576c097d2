#include "base/check.hpp"

#include <cerrno>
#include <cstring>

#include "base/log.hpp"

namespace troupe {

void fail(const char* kind, const char* expr, const char* file, int line, const std::string& hint) {
  const std::string origin = expr && *expr ? str_cat("[", kind, " `", expr, "` failed at ", file, ":", line, "]")
                                           : str_cat("[at ", file, ":", line, "]");
  // The error a user reads is the hint alone; where it was raised goes to the debug log.
  if (hint.empty()) throw Error(origin);
  logger("check").debug(hint, " ", origin);
  throw Error(hint);
}

void fail_errno(const char* expr, const char* file, int line, const std::string& hint) {
  const int err = errno;
  fail("system call", expr, file, line, str_cat(hint, hint.empty() ? "" : ": ", std::strerror(err)));
}

}  // namespace troupe
