// The training actors' interfaces as caf::typed_actor: what each actor accepts, who sends it,
// and what it answers. A handle of one of these types only sends what the actor handles (a
// wrong message does not compile), and an actor class deriving from `X::base` must handle
// every message of X. Atoms and payload types: messages.hpp; the errors the actors answer
// with: run_error.hpp. docs/architecture.md shows the messages of one training iteration.
//
//   loader_actor loader = spawn_loader(system, std::move(train), std::move(valid));
//   self->request(loader, timeout, batch_atom::value, true, int64_t(8))
//       .then([](BatchList& batches) { ... }, [](caf::error& e) { ... });  // RunError::data
//
// Several interfaces are one actor's face towards one sender (the stage as the optimizer sees
// it): a handle of the whole interface converts to each of them.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/monitor/trace_forwarding.hpp"
#include "actors/train/messages.hpp"

namespace troupe::actors {

// The data loader (loader_actor.hpp). The trainer asks
//   (batch_atom, bool train, int64 count) -> BatchList
// for `count` microbatches of the training (train) or validation data. After answering a
// training request it prefetches the next one of the same count. Errors: RunError::data.
using loader_actor = caf::typed_actor<caf::replies_to<batch_atom, bool, int64_t>::with<BatchList>>;

// The gradient bucket reducer (grad_reducer_actor.hpp), one per device with
// --overlap-grad-reduce. Its stage sends (bucket_atom, BucketReady) for every bucket as its
// gradients become final; once the last bucket of an iteration is under way the reducer
// sends (reduced_atom, BucketsReduced) to the sender of that bucket (a reduced_listener).
// A failed collective ends the reducer with RunError::reduction (its monitors see it go down).
using grad_reducer_actor = caf::typed_actor<caf::reacts_to<bucket_atom, BucketReady>>;

// A stage as its gradient reducer sees it: told when every bucket's reduction is under way.
using reduced_listener = caf::typed_actor<caf::reacts_to<reduced_atom, BucketsReduced>>;

// A stage as the optimizer sees it: (apply_atom, StepRequest, float clip, bool skip) -> bool
// (true) once the stage has applied AdamW with that clip coefficient (or skipped the step).
// Errors: RunError::stage_failed.
using stage_update_actor = caf::typed_actor<caf::replies_to<apply_atom, StepRequest, float, bool>::with<bool>>;

// The optimizer (optimizer_actor.hpp). The trainer asks
//   (step_atom, StepRequest) -> StepResult
// once every stage has reported; the optimizer asks each stage (a stage_update_actor) to
// apply the step. Errors: RunError::optimizer.
using optimizer_actor = caf::typed_actor<caf::replies_to<step_atom, StepRequest>::with<StepResult>>;

// The trainer as a stage sees it. A stage sends its trainer
//   (report_atom, StageReport)           once its ops of an iteration have finished (training:
//                                        with its gradient statistics, or the step it took)
//   (progress_atom, TraceEvent)          when an op starts (end_ns == 0) and ends; with tracing
//                                        also a recv event for each received input
//   (fail_atom, caf::error)              RunError::stage_failed, before it quits with that error
using stage_listener =
    caf::typed_actor<caf::reacts_to<report_atom, StageReport>, caf::reacts_to<progress_atom, schedules::TraceEvent>,
                     caf::reacts_to<fail_atom, caf::error>>;

// A stage as another stage sees it:
//   (parcel_atom, TensorMessage)         an activation or gradient from a stage of this process
//                                        (the tensor travels in the message)
//   (parcel_atom, RemoteParcel)          ... from a stage of another process, through CAF's
//                                        middleman (the tensor comes over the channel)
//   (order_atom, int64 iteration, int kind (0 forward, 1 backward), int microbatch, int chunk)
//                                        tensor rank 0 of a stage to its other tensor ranks: the
//                                        op it started, which they run in the same order
using stage_peer_actor =
    caf::typed_actor<caf::reacts_to<parcel_atom, TensorMessage>, caf::reacts_to<parcel_atom, RemoteParcel>,
                     caf::reacts_to<order_atom, int64_t, int, int, int>>;

// The stage actor (stage_actor.hpp): what other stages (stage_peer_actor), the optimizer
// (stage_update_actor) and its gradient reducer (reduced_listener) send it, and from the trainer
//   (peers_atom, stage_listener trainer, vector<stage_peer_actor> pipeline,
//    vector<stage_peer_actor> followers)  once, before the first plan: where reports go, the
//                                        stages of its pipeline by stage index, and (tensor
//                                        rank 0) the other tensor ranks of its stage
//   (plan_atom, IterationPlan)           starts an iteration; the answer is the report
// and to itself
//   (pump_atom)                          pick the next op (with fixed op durations: after a settle delay)
//   (done_atom, uint64 op id, int64 start ns, int64 end ns)
//                                        an op finished on the device (its completion callback)
//   (tied_atom)                          the tied embedding's gradient sum is enqueued ...
//   (stats_atom)                         ... and done: the iteration's gradient statistics follow
using stage_actor = stage_peer_actor::extend_with<stage_update_actor, reduced_listener>::extend<
    caf::reacts_to<peers_atom, stage_listener, std::vector<stage_peer_actor>, std::vector<stage_peer_actor>>,
    caf::reacts_to<plan_atom, IterationPlan>, caf::reacts_to<pump_atom>,
    caf::reacts_to<done_atom, uint64_t, int64_t, int64_t>, caf::reacts_to<tied_atom>, caf::reacts_to<stats_atom>>;

// The trainer (trainer_actor.hpp): what its stages send it (stage_listener), and from TrainingRun
//   (train_atom) -> IterationStats       one training iteration
//   (eval_atom, int64 microbatches) -> double
//                                        the mean per-token validation loss
//   (resume_atom, int64 iteration, uint64 seed) -> bool
//                                        before the first iteration: continue a loaded
//                                        checkpoint's numbering (false: busy or failed)
//   (attach_atom, caf::actor monitor, shared_ptr<TraceQueue>)
//                                        forward traced events to the run's monitor (an
//                                        untyped actor of actors/monitor: reached by anon_send)
//   (host_op_atom, TraceEvent)           a host op between iterations (a checkpoint save)
// and to itself (tick_atom, uint64 generation): the watchdog. A failed train or eval answers
// the run's failure: RunError::stage_failed, timeout, data, optimizer, reduction or stopped;
// RunError::rejected while an iteration runs or once the run has failed.
using trainer_actor =
    stage_listener::extend<caf::replies_to<train_atom>::with<IterationStats>,
                           caf::replies_to<eval_atom, int64_t>::with<double>,
                           caf::replies_to<resume_atom, int64_t, uint64_t>::with<bool>,
                           caf::reacts_to<attach_atom, caf::actor, std::shared_ptr<TraceQueue>>,
                           caf::reacts_to<host_op_atom, schedules::TraceEvent>, caf::reacts_to<tick_atom, uint64_t>>;

// The checkpoint writer (checkpoint_writer_actor.hpp). TrainingRun sends
//   (save_atom, shared_ptr<SaveJob>)
// and waits for the job's std::promise from outside the actor system (no CAF answer).
using checkpoint_writer_actor = caf::typed_actor<caf::reacts_to<save_atom, std::shared_ptr<SaveJob>>>;

// How a training actor runs. Production: detached (its own thread; it blocks on files,
// collectives or the device). Tests: on the scheduler, so that CAF's test coordinator
// (scheduler.policy "testing"), which does not run detached actors, steps it message by message.
enum class SpawnMode : uint8_t { detached, scheduled };

}  // namespace troupe::actors
