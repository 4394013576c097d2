#include "kernels/check.hpp"

#include <cerrno>
#include <cstring>

namespace troupe {

void fail(const char* kind, const char* expr, const char* file, int line, const std::string& hint) {
  std::string msg = hint;
  if (expr && *expr) msg += str_cat(hint.empty() ? "" : " ", "[", kind, " `", expr, "` failed");
  else msg += " [";
  msg += str_cat(" at ", file, ":", line, "]");
  throw Error(msg);
}

void fail_errno(const char* expr, const char* file, int line, const std::string& hint) {
  const int err = errno;
  fail("system call", expr, file, line, str_cat(hint, hint.empty() ? "" : ": ", std::strerror(err)));
}

}  // namespace troupe
