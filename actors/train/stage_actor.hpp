// The stage actor: one per pipeline stage, spawned detached (its own thread, so the device
// it owns keeps one current-device setting and blocking device calls never stall the CAF
// scheduler). Whenever it is idle it asks its StagePolicy for the next ready op, runs it
// through its StageWorker (which enqueues it on the device), sends the output to the next
// virtual stage or the input gradient to the previous one, and learns of the op's completion
// as a message (a CUDA host callback on a GPU; at once on a CPU device).
//
// Protocol: stage_actor (protocols.hpp). (peers_atom, trainer, pipeline, followers) once,
// from the trainer; (plan_atom, IterationPlan) starts an iteration, answered by (report_atom,
// StageReport) when every op has finished (training: after summing a tied embedding's
// gradient copies with the other holder and handing the gradients to the device's optimizer
// shard, (grads_atom, GradsReady)); (progress_atom, TraceEvent) to the trainer when an op
// starts (end_ns == 0) and ends, and with tracing a recv event for each received input; any
// failure -> (fail_atom, error) to the trainer (RunError::stage_failed, "stage s failed in
// ..."), then the actor quits with that error.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>

#include "actors/train/protocols.hpp"
#include "actors/train/stage_worker.hpp"
#include "schedules/schedule.hpp"

namespace troupe::actors {

struct StageOptions {
  schedules::Schedule schedule = schedules::Schedule::one_f_one_b;
  int group_size = 0;
  int device = 0;           // device index, for the trace
  int max_outstanding = 1;  // ops enqueued but not finished: 1 on a CPU device, a few on a GPU (run ahead)
  // Runs its ops in the order its leader sends (order_atom), not by its own policy: the ranks
  // whose collectives pair up inside ops (RankLayout::order_group) must run one order.
  bool follower = false;
  // Tests: every op takes exactly this long (the canonical-order test); decisions then wait a
  // third of it, so peers that finished at the same instant are seen (the simulator's rule).
  std::chrono::microseconds fixed_op_duration{0};
  std::function<void(int stage, const schedules::Op& op)> before_op;  // tests: may throw or sleep
  std::chrono::steady_clock::time_point epoch;                        // the trace clock's zero
  grad_reducer_actor reducer;      // --overlap-grad-reduce: this device's gradient reducer (else null)
  grads_listener optimizer_shard;  // this device's optimizer shard (training)
};

stage_actor spawn_stage(caf::actor_system& system, std::shared_ptr<StageWorker> worker, StageOptions options,
                        ActorThread mode = ActorThread::detached);

}  // namespace troupe::actors
