// A test hook, not a feature (docs/testing.md): TROUPE_SLOW_DEVICE=RANK:MS makes the device of
// global rank RANK sleep MS milliseconds inside each of its forward and backward ops, where the
// op's time is taken (on CPU devices; a GPU's op times are the device's own), so that tests can
// slow one device down and check that the straggler report (apps/train/straggler_report.hpp)
// names it.
//
//   std::optional<Outbound> out = worker.run(op);
//   std::this_thread::sleep_for(injected_op_delay(worker));   // 0 unless the hook names it
#pragma once

#include <chrono>

#include "actors/train/stage_worker.hpp"

namespace troupe::actors {

// The delay TROUPE_SLOW_DEVICE (read once) gives `worker`'s device: 0 for every other device and
// when unset. A value that is not RANK:MS (non-negative integers) is an error naming the variable.
std::chrono::microseconds injected_op_delay(const StageWorker& worker);

}  // namespace troupe::actors
