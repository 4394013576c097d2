// One family of always-on checks. Every failed check goes through fail(), which
// throws troupe::Error whose message is the hint (one sentence for the user); the statement,
// file and line go to the debug log (--log-level debug), or into the message when there is
// no hint. Library code never exit()s; the owner of the work decides what a failure means.
//
//   TROUPE_CHECK(x.numel() == y.numel(), "layernorm: x and y differ: ", x.numel(), " vs ", y.numel());
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace troupe {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void fail(const char* kind, const char* expr, const char* file, int line, const std::string& hint);

}  // namespace troupe

#define TROUPE_CHECK(cond, ...)                                                                      \
  do {                                                                                               \
    if (!(cond)) ::troupe::fail("check", #cond, __FILE__, __LINE__, ::troupe::str_cat(__VA_ARGS__)); \
  } while (0)

#define TROUPE_FAIL(...) ::troupe::fail("error", "", __FILE__, __LINE__, ::troupe::str_cat(__VA_ARGS__))

// Checks a POSIX call that returns -1 and sets errno.
#define TROUPE_SYSCALL(call, ...)                                                                      \
  do {                                                                                                 \
    if ((call) == -1) ::troupe::fail_errno(#call, __FILE__, __LINE__, ::troupe::str_cat(__VA_ARGS__)); \
  } while (0)

namespace troupe {
[[noreturn]] void fail_errno(const char* expr, const char* file, int line, const std::string& hint);
}
