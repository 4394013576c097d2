#include "actors/train/clock_shift_hook.hpp"

#include <optional>

#include "actors/train/test_hook_env.hpp"

namespace troupe::actors {

namespace {

struct ClockShift {
  int64_t process = 0;
  std::chrono::milliseconds shift{0};
};

std::optional<ClockShift> clock_shift() {
  const auto v = hook_number_pair("TROUPE_CLOCK_SHIFT",
                                  "PROCESS:MS: set it to the process whose trace clock should start MS milliseconds "
                                  "early (a test hook), or unset it");
  if (!v) return std::nullopt;
  return ClockShift{(*v)[0], std::chrono::milliseconds((*v)[1])};
}

}  // namespace

std::chrono::milliseconds injected_clock_shift(int process) {
  static const std::optional<ClockShift> shift = clock_shift();
  return shift && shift->process == process ? shift->shift : std::chrono::milliseconds(0);
}

}  // namespace troupe::actors
