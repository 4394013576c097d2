// Test hooks, not features (docs/testing.md), that give ops a duration by sleeping inside them,
// where the op's time is taken (on CPU devices; a GPU's op times are the device's own):
// - TROUPE_SLOW_DEVICE=RANK:MS makes the device of global rank RANK sleep MS milliseconds in
//   each of its forward and backward ops, so that tests can slow one device down and check that
//   the straggler report (apps/train/straggler_report.hpp) names it;
// - TROUPE_OP_SLEEP=LAYER_MS:HEAD_MS makes every forward sleep LAYER_MS per transformer layer of
//   its chunk, plus HEAD_MS on the last virtual stage (as the LM head and loss would take), and
//   every backward twice that: op times shaped like a real model's but steady, so that tests of
//   the replay's cost model (tests/apps/replay_validation_test.cpp) test the model, not noise.
//
//   std::optional<Outbound> out = worker.run(op);
//   std::this_thread::sleep_for(injected_op_delay(worker) + injected_op_sleep(worker, op));  // 0 unless set
#pragma once

#include <chrono>

#include "actors/train/stage_worker.hpp"

namespace troupe::actors {

// The delay TROUPE_SLOW_DEVICE (read once) gives `worker`'s device: 0 for every other device and
// when unset. A value that is not RANK:MS (non-negative integers) is an error naming the variable.
std::chrono::microseconds injected_op_delay(const StageWorker& worker);

// The sleep TROUPE_OP_SLEEP (read once) gives `op` on `worker`: 0 when unset. A value that is not
// LAYER_MS:HEAD_MS (non-negative integers) is an error naming the variable.
std::chrono::microseconds injected_op_sleep(StageWorker& worker, const schedules::Op& op);
// Whether TROUPE_OP_SLEEP is set: the ops' time is then the sleep, outside the layers, so their
// layer spans would tell the replay the time is the op's own (the stage marks none).
bool op_sleep_injected();

}  // namespace troupe::actors
