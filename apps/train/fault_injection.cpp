#include "apps/train/fault_injection.hpp"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

#include "base/check.hpp"

namespace troupe::apps {

namespace {

constexpr const char* kFaultVariable = "TROUPE_FAULT_AT_ITERATION";
constexpr const char* kRestartVariable = "TROUPE_RESTART_COUNT";

// The iteration to fail at; nullopt when the hook is off (or this is a restarted process).
std::optional<int64_t> fault_iteration() {
  const char* fault = std::getenv(kFaultVariable);
  if (fault == nullptr || *fault == '\0') return std::nullopt;
  const char* restart = std::getenv(kRestartVariable);
  if (restart != nullptr && std::string(restart) != "0") return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long k = std::strtoll(fault, &end, 10);
  TROUPE_CHECK(end != fault && *end == '\0' && errno == 0 && k > 0, kFaultVariable, "=", fault,
               " is not a positive iteration: set it to the iteration the test run should fail at, or unset it");
  return k;
}

}  // namespace

void fail_if_fault_injected(int64_t iteration) {
  static const std::optional<int64_t> at = fault_iteration();
  if (at && iteration == *at)
    TROUPE_FAIL(kFaultVariable, "=", *at, ": the failure injected for testing at iteration ", iteration,
                " (unset the variable to train normally)");
}

}  // namespace troupe::apps
