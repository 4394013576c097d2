// The training actors' interfaces as caf::typed_actor: what each actor accepts, who sends it,
// and what it answers. A handle of one of these types only sends what the actor handles (a
// wrong message does not compile), and an actor class deriving from `X::base` must handle
// every message of X. Atoms and payload types: messages.hpp; the errors the actors answer
// with: run_error.hpp. docs/architecture.md shows the messages of one training iteration.
//
//   loader_actor loader = spawn_loader(system, std::move(setup));
//   self->request(loader, timeout, batch_atom::value, int64_t(iteration), true, int64_t(8))
//       .then([](BatchInfo& info) { ... }, [](caf::error& e) { ... });  // RunError::data
//
// Several interfaces are one actor's face towards one sender (the stage as the optimizer sees
// it): a handle of the whole interface converts to each of them.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/actor_thread.hpp"
#include "actors/monitor/protocols.hpp"
#include "actors/monitor/trace_forwarding.hpp"
#include "actors/train/messages.hpp"

namespace troupe::actors {

// A stage as the data loader sees it: (data_atom, StageData) with its microbatches of one
// iteration, before or after the iteration's plan.
using data_listener = caf::typed_actor<caf::reacts_to<data_atom, StageData>>;

// The data loader (loader_actor.hpp). The trainer asks
//   (batch_atom, int64 iteration, bool train, int64 count) -> BatchInfo
// for `count` microbatches of the training (train) or validation data, for the plan numbered
// `iteration`; the loader sends each stage that consumes data (a data_listener) its part as
// StageData, then answers with the counts. After answering a training request it reads the
// next one of the same count ahead. Errors: RunError::data (nothing is sent then).
using loader_actor = caf::typed_actor<caf::replies_to<batch_atom, int64_t, bool, int64_t>::with<BatchInfo>>;

// The gradient bucket reducer (grad_reducer_actor.hpp), one per device with
// --overlap-grad-reduce. Its stage sends (bucket_atom, BucketReady) for every bucket as its
// gradients become final; once the last bucket of an iteration is under way the reducer
// sends (reduced_atom, BucketsReduced) to the device's optimizer shard (a reduced_listener).
// A failed collective ends the reducer with RunError::reduction (its monitors see it go down).
using grad_reducer_actor = caf::typed_actor<caf::reacts_to<bucket_atom, BucketReady>>;

// An optimizer shard as the gradient reducer sees it: told when every bucket's reduction is under way.
using reduced_listener = caf::typed_actor<caf::reacts_to<reduced_atom, BucketsReduced>>;

// An optimizer shard as its stage sees it: (grads_atom, GradsReady) once the stage's ops of an
// iteration have run.
using grads_listener = caf::typed_actor<caf::reacts_to<grads_atom, GradsReady>>;

// An optimizer shard as the optimizer sees it: (apply_atom, ShardStep) -> bool (true) once
// the shard has applied AdamW with the step's clip coefficient (or skipped the step).
// Errors: RunError::optimizer.
using shard_update_actor = caf::typed_actor<caf::replies_to<apply_atom, ShardStep>::with<bool>>;

// The optimizer as a shard sees it: (norm_atom, ShardReport) with the shard's part of the
// global norm (or the whole step it took).
using shard_listener = caf::typed_actor<caf::reacts_to<norm_atom, ShardReport>>;

// The optimizer shard (optimizer_shard_actor.hpp), one per device: owns the device's master
// weights and Adam moments (a StageOptimizer). What its stage (grads_listener), its gradient
// reducer (reduced_listener) and the optimizer (shard_update_actor) send it, and once, from the
// optimizer before the first iteration, (peers_atom, shard_listener optimizer): where its
// reports go. Once it has both its stage's GradsReady and (with a reducer) the reducer's
// BucketsReduced for an iteration, it finishes the gradient reduction and reports its part of
// the norm. From TrainingRun, at any time,
//   (state_copy_atom, shared_ptr<StateCopy>) -> bool
// copies the state for a checkpoint, in mailbox order with the rest: the state of a whole
// number of steps. A failure ends it with RunError::optimizer (the trainer sees it go down).
using optimizer_shard_actor = grads_listener::extend_with<reduced_listener, shard_update_actor>::extend<
    caf::reacts_to<peers_atom, shard_listener>,
    caf::replies_to<state_copy_atom, std::shared_ptr<StateCopy>>::with<bool>>;

// The optimizer (optimizer_actor.hpp): the shards' reports (shard_listener) and, from the
// trainer once every stage has reported, (step_atom, StepRequest) -> StepResult. With every
// local shard's part (and, over processes, everyone's) it computes the global norm and the clip
// coefficient once, and sends that one coefficient to every shard. Errors: RunError::optimizer.
using optimizer_actor = shard_listener::extend<caf::replies_to<step_atom, StepRequest>::with<StepResult>>;

// The trainer as a stage sees it. A stage sends its trainer
//   (report_atom, StageReport)           once its ops of an iteration have finished (its loss sum)
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
//                                        the leader of an order group (RankLayout::order_group)
//                                        to the rest: the op it started, which they run in the
//                                        same order
using stage_peer_actor =
    caf::typed_actor<caf::reacts_to<parcel_atom, TensorMessage>, caf::reacts_to<parcel_atom, RemoteParcel>,
                     caf::reacts_to<order_atom, int64_t, int, int, int>>;

// The stage actor (stage_actor.hpp): what other stages (stage_peer_actor) and the data loader
// (data_listener) send it, and from the trainer
//   (peers_atom, stage_listener trainer, vector<stage_peer_actor> pipeline,
//    vector<stage_peer_actor> followers)  once, before the first plan: where reports go, the
//                                        stages of its pipeline by stage index, and (the
//                                        leader of its order group) the group's other ranks
//   (plan_atom, IterationPlan)           starts an iteration once its data (if the stage takes
//                                        any) is in; the answer is the report
// and to itself
//   (pump_atom)                          pick the next op (with fixed op durations: after a settle delay)
//   (done_atom, uint64 op id, int64 start ns, int64 end ns, vector<int64> spans)
//                                        an op finished on the device (its completion callback);
//                                        spans: (kind, start ns, end ns) per span marked in it
//   (tied_atom)                          the tied embedding's gradient sum is enqueued ...
//   (stats_atom)                         ... and done: the iteration's gradient statistics follow
using stage_actor = stage_peer_actor::extend_with<data_listener>::extend<
    caf::reacts_to<peers_atom, stage_listener, std::vector<stage_peer_actor>, std::vector<stage_peer_actor>>,
    caf::reacts_to<plan_atom, IterationPlan>, caf::reacts_to<pump_atom>,
    caf::reacts_to<done_atom, uint64_t, int64_t, int64_t, std::vector<int64_t>>, caf::reacts_to<tied_atom>,
    caf::reacts_to<stats_atom>>;

// The trainer (trainer_actor.hpp): what its stages send it (stage_listener), and from TrainingRun
//   (train_atom) -> IterationStats       one training iteration
//   (eval_atom, int64 microbatches) -> double
//                                        the mean per-token validation loss
//   (resume_atom, int64 iteration, int64 lr updates, uint64 seed) -> bool
//                                        before the first iteration: continue a loaded
//                                        checkpoint's numbering and LR schedule (false: busy or failed)
//   (attach_atom, monitor_trace_actor monitor, shared_ptr<TraceQueue>)
//                                        forward traced events to the run's monitor
//   (host_op_atom, TraceEvent)           a host op between iterations (a checkpoint save)
// and to itself (tick_atom, uint64 generation): the watchdog. A failed train or eval answers
// the run's failure: RunError::stage_failed, timeout, data, optimizer, reduction or stopped;
// RunError::rejected while an iteration runs or once the run has failed.
using trainer_actor =
    stage_listener::extend<caf::replies_to<train_atom>::with<IterationStats>,
                           caf::replies_to<eval_atom, int64_t>::with<double>,
                           caf::replies_to<resume_atom, int64_t, int64_t, uint64_t>::with<bool>,
                           caf::reacts_to<attach_atom, monitor_trace_actor, std::shared_ptr<TraceQueue>>,
                           caf::reacts_to<host_op_atom, schedules::TraceEvent>, caf::reacts_to<tick_atom, uint64_t>>;

// The stage directory (TrainingRun::Impl::connect_processes), one per process of a run over
// several: process p hands process q < p its stage actors and gets q's back,
//   (peers_atom, int process p, vector<caf::actor> p's stages) -> vector<caf::actor> q's stages
// The handles travel untyped (a serialized handle is a plain caf::actor; the middleman knows
// no vector of typed ones); the receiver casts them back to stage_actor. Process p then pings
// it for as long as the run lasts (process_heartbeat.hpp):
//   (heartbeat_atom, int process p) -> int (0)
using stage_directory_actor =
    caf::typed_actor<caf::replies_to<peers_atom, int, std::vector<caf::actor>>::with<std::vector<caf::actor>>,
                     caf::replies_to<heartbeat_atom, int>::with<int>>;

// The checkpoint writer (checkpoint_writer_actor.hpp). TrainingRun sends
//   (save_atom, shared_ptr<SaveJob>)
// and waits for the job's std::promise from outside the actor system (no CAF answer).
using checkpoint_writer_actor = caf::typed_actor<caf::reacts_to<save_atom, std::shared_ptr<SaveJob>>>;

}  // namespace troupe::actors
