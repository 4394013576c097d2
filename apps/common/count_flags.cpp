#include "apps/common/count_flags.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

namespace troupe::apps {

namespace {

// "" when `text` is an integer >= `least`; else why not.
std::string count_problem(const std::string& text, long long least) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE) return "got " + text + ", which is not an integer";
  if (v < least) return "got " + text + ", must be " + (least > 0 ? "a positive integer" : "0 or more");
  return "";
}

}  // namespace

CLI::Validator positive_count() {
  return CLI::Validator([](std::string& text) { return count_problem(text, 1); }, "POSITIVE", "positive integer");
}

CLI::Validator non_negative_count() {
  return CLI::Validator([](std::string& text) { return count_problem(text, 0); }, "NONNEGATIVE",
                        "non-negative integer");
}

}  // namespace troupe::apps
