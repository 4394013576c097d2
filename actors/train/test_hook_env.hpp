// The environment variables of the test hooks (docs/testing.md: TROUPE_SLOW_DEVICE,
// TROUPE_OP_SLEEP, TROUPE_CLOCK_SHIFT) share one shape, two non-negative integers A:B.
//
//   auto pair = hook_number_pair("TROUPE_SLOW_DEVICE", "RANK:MS: set it to ..., or unset it");
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace troupe::actors {

// Variable `name` read as A:B: nullopt when unset or empty; anything else that is not two
// non-negative integers is an error "NAME=VALUE is not <form>".
std::optional<std::array<int64_t, 2>> hook_number_pair(const char* name, const char* form);

}  // namespace troupe::actors
