// A test hook, not a feature (docs/testing.md): TROUPE_FAULT_AT_ITERATION=k makes `troupe train`
// fail with an error right after iteration k has trained (before its log line and checkpoint),
// as a crashed run would, so tests of `--auto-restart` (apps/train/supervisor.hpp) can fail a
// run at a chosen point. It fires only in a first start: TROUPE_RESTART_COUNT, which the
// supervisor sets for each training process it starts, unset or 0; the restarted process goes on.
//
//   const IterationStats s = run.train_iteration();
//   fail_if_fault_injected(s.iteration);  // throws troupe::Error at the chosen iteration
#pragma once

#include <cstdint>

namespace troupe::apps {

// Throws at the iteration TROUPE_FAULT_AT_ITERATION names (read once); a value that is no
// positive integer is an error naming the variable.
void fail_if_fault_injected(int64_t iteration);

}  // namespace troupe::apps
