#include "actors/train/slow_device_hook.hpp"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

#include "base/check.hpp"
#include "model/rank_layout.hpp"

namespace troupe::actors {

namespace {

constexpr const char* kVariable = "TROUPE_SLOW_DEVICE";

struct SlowDevice {
  int64_t rank = 0;
  std::chrono::microseconds delay{0};
};

// The non-negative integer `text` spells, or nullopt.
std::optional<int64_t> whole_number(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  return errno == 0 ? std::optional<int64_t>(v) : std::nullopt;
}

std::optional<SlowDevice> slow_device() {
  const char* value = std::getenv(kVariable);
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string text = value;
  const size_t colon = text.find(':');
  const std::optional<int64_t> rank = whole_number(text.substr(0, colon));
  const std::optional<int64_t> ms = colon == std::string::npos ? std::nullopt : whole_number(text.substr(colon + 1));
  TROUPE_CHECK(rank && ms, kVariable, "=", text,
               " is not RANK:MS: set it to the device's global rank and the milliseconds each of its ops should "
               "sleep (a test hook), or unset it");
  return SlowDevice{*rank, std::chrono::milliseconds(*ms)};
}

}  // namespace

std::chrono::microseconds injected_op_delay(const StageWorker& worker) {
  static const std::optional<SlowDevice> slow = slow_device();
  if (!slow) return std::chrono::microseconds(0);
  const RankLayout layout{.tensor = worker.tp_size(), .data = worker.dp_size(), .pipeline = worker.stages()};
  const int rank = layout.rank({.pp = worker.stage(), .dp = worker.dp_rank(), .tp = worker.tp_rank()});
  return rank == slow->rank ? slow->delay : std::chrono::microseconds(0);
}

}  // namespace troupe::actors
