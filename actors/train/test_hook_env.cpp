#include "actors/train/test_hook_env.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

// The non-negative integer `text` spells, or nullopt.
std::optional<int64_t> whole_number(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  return errno == 0 ? std::optional<int64_t>(v) : std::nullopt;
}

}  // namespace

std::optional<std::array<int64_t, 2>> hook_number_pair(const char* name, const char* form) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string text = value;
  const size_t colon = text.find(':');
  const std::optional<int64_t> a = whole_number(text.substr(0, colon));
  const std::optional<int64_t> b = colon == std::string::npos ? std::nullopt : whole_number(text.substr(colon + 1));
  TROUPE_CHECK(a && b, name, "=", text, " is not ", form);
  return std::array<int64_t, 2>{*a, *b};
}

}  // namespace troupe::actors
