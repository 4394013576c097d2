// Which way CUDA makes the grouped weight gradient: ScopedGroupedDw, else TROUPE_GROUPED_DW.
#include "kernels/grouped_dw_path.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/check.hpp"

namespace troupe {

namespace {

constexpr const char* kVariable = "TROUPE_GROUPED_DW";
constexpr int kNoOverride = -1;
constexpr GroupedDw kPaths[] = {GroupedDw::loop, GroupedDw::streams, GroupedDw::tf32, GroupedDw::kernel};

// A selection policy, like the environment variable it stands in for; no device state.
std::atomic<int> path_override{kNoOverride};

}  // namespace

const char* grouped_dw_name(GroupedDw path) {
  switch (path) {
    case GroupedDw::loop:
      return "loop";
    case GroupedDw::streams:
      return "streams";
    case GroupedDw::tf32:
      return "tf32";
    case GroupedDw::kernel:
      return "kernel";
  }
  return "?";
}

GroupedDw parse_grouped_dw(std::string_view value) {
  for (GroupedDw p : kPaths)
    if (value == grouped_dw_name(p)) return p;
  TROUPE_FAIL(
      kVariable, "=", std::string(value),
      " is not a way to make the grouped weight gradient; use loop, streams, tf32 or kernel (or leave it unset)");
}

GroupedDw grouped_dw(int64_t groups) {
  const int forced = path_override.load(std::memory_order_relaxed);
  if (forced != kNoOverride) return GroupedDw(forced);
  const char* env = std::getenv(kVariable);  // read each call: cheap next to a backward's GEMMs
  // kernel for many groups: one launch for all, where the per-group GEMMs are bound by the host's
  // ~7.5 us per cuBLASLt call once the experts are many and small.
  if (env == nullptr || env[0] == '\0')
    return groups >= kGroupedDwKernelGroups ? GroupedDw::kernel : GroupedDw::streams;
  return parse_grouped_dw(env);
}

ScopedGroupedDw::ScopedGroupedDw(GroupedDw path) : previous_(path_override.exchange(int(path))) {}

ScopedGroupedDw::~ScopedGroupedDw() { path_override.store(previous_); }

}  // namespace troupe
