// A test hook, not a feature (docs/testing.md): TROUPE_CLOCK_SHIFT=PROCESS:MS starts the trace
// clock of process PROCESS of a run MS milliseconds early, so its times read MS more than they
// would: processes whose clocks are far apart, as on machines booted at different times, for the
// test that `troupe replay` puts their traces on one timeline
// (tests/apps/replay_validation_test.cpp).
//
//   run.epoch -= injected_clock_shift(fabric->process());   // 0 unless the hook names it
#pragma once

#include <chrono>

namespace troupe::actors {

// The shift TROUPE_CLOCK_SHIFT (read once) gives process `process`: 0 for every other process and
// when unset. A value that is not PROCESS:MS (non-negative integers) is an error naming the variable.
std::chrono::milliseconds injected_clock_shift(int process);

}  // namespace troupe::actors
