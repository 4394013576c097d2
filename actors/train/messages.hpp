// The messages the runtime's actors exchange (all process-local): atoms and payload types.
// Payloads carry tensor handles and metadata, never bulk data; they hold Tensors and
// shared_ptrs, so they are whitelisted as unsafe (local-only) message types.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/train/stage_worker.hpp"
#include "kernels/grad_norm.hpp"
#include "model/train/optimizer.hpp"
#include "model/train/trainer.hpp"
#include "schedules/trace.hpp"

namespace troupe::actors {

// The typed interfaces that use these: protocols.hpp.
// TrainingRun -> trainer
using train_atom = caf::atom_constant<caf::atom("train")>;  // one iteration -> IterationStats
using eval_atom = caf::atom_constant<caf::atom("eval")>;    // (int64 microbatches) -> double (mean loss)
// trainer -> data loader: (int64 iteration, bool train, int64 count) -> BatchInfo;
// data loader -> the first and last stages: (StageData)
using batch_atom = caf::atom_constant<caf::atom("batch")>;
using data_atom = caf::atom_constant<caf::atom("data")>;
// trainer -> stages, stages -> trainer
// (trainer, pipeline stages, followers); between the processes' directories of their stages
// (training_run.cpp): (int process, vector<actor> its stages) -> vector<actor> ours
using peers_atom = caf::atom_constant<caf::atom("peers")>;
using plan_atom = caf::atom_constant<caf::atom("plan")>;          // (IterationPlan)
using report_atom = caf::atom_constant<caf::atom("report")>;      // (StageReport)
using progress_atom = caf::atom_constant<caf::atom("progress")>;  // (TraceEvent) after every op
using fail_atom = caf::atom_constant<caf::atom("fail")>;          // (caf::error, RunError::stage_failed) a stage failed
// stage -> stage
using parcel_atom = caf::atom_constant<caf::atom("parcel")>;  // (TensorMessage)
using pump_atom = caf::atom_constant<caf::atom("pump")>;      // to self: pick the next op
using done_atom = caf::atom_constant<caf::atom("done")>;      // to self: (uint64 op id, int64 end ns)
// stage to itself at the end of an iteration: tied gradients summed (enqueued), then finished
using tied_atom = caf::atom_constant<caf::atom("tied")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
// stage -> its optimizer shard: (GradsReady); shard -> optimizer: (ShardReport)
using grads_atom = caf::atom_constant<caf::atom("grads")>;
using norm_atom = caf::atom_constant<caf::atom("norm")>;
// trainer -> optimizer: (StepRequest) -> StepResult; optimizer -> shards: (ShardStep) -> bool
using step_atom = caf::atom_constant<caf::atom("step")>;
using apply_atom = caf::atom_constant<caf::atom("apply")>;
using resume_atom =
    caf::atom_constant<caf::atom("resume")>;  // (int64 iteration, uint64 seed) -> bool, before the first iteration
using tick_atom = caf::atom_constant<caf::atom("tick")>;            // to self: watchdog
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;  // (int process) -> int: still alive
// stage -> its gradient reducer: (BucketReady); reducer -> the stage's optimizer shard: (BucketsReduced)
using bucket_atom = caf::atom_constant<caf::atom("bucket")>;
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;
// tensor rank 0 -> the other tensor ranks of its stage: (int64 iteration, int kind (0 fwd, 1 bwd), int microbatch, int
// chunk)
using order_atom = caf::atom_constant<caf::atom("order")>;
using save_atom = caf::atom_constant<caf::atom("save")>;  // (shared_ptr<SaveJob>): write a checkpoint snapshot
// TrainingRun -> optimizer shard: (shared_ptr<StateCopy>) -> bool, copy the state for a checkpoint
using state_copy_atom = caf::atom_constant<caf::atom("statecopy")>;

using BatchList = std::vector<Batch>;

// What the data loader tells the trainer of a batch it has sent to the stages.
struct BatchInfo {
  int64_t microbatches = 0;
  int64_t target_tokens = 0;  // targets not ignored, over every microbatch (the loss's denominator)
};

// The data loader to a stage: its microbatches of one iteration (or evaluation), host i32
// [B, T] each: the inputs for the stage holding virtual stage 0, the labels (-1: ignored) for
// the one holding the last; empty where the stage holds neither.
struct StageData {
  int64_t iteration = 0;  // IterationPlan::iteration of the plan they belong to
  std::vector<Tensor> tokens;
  std::vector<Tensor> targets;
};

struct TensorMessage {
  int64_t iteration = 0;
  Direction direction = Direction::activation;
  int microbatch = 0;
  int chunk = 0;  // the receiver's local chunk
  Parcel parcel;
};

struct StageReport {
  int stage = 0;
  int tp = 0, dp = 0;  // tensor rank, and rank in the data x context group, of the reporting device
  int64_t iteration = 0;
  double loss_sum = 0;  // last stage: sum of per-token losses of the iteration
  // An MoE model's router statistics of the stage's chunks (training).
  std::vector<MoeLayerStats> moe{};
};

// A stage to its optimizer shard: every op of `iteration` has run and the tied embedding's
// copies are summed (enqueued on the device); the gradient buckets not reduced yet are with
// the gradient reducer (--overlap-grad-reduce).
struct GradsReady {
  int64_t iteration = 0;
  // IterationPlan::local_step: the shard takes the whole step with these.
  bool local_step = false;
  float lr = 0;
  float loss_scale = 1;
};

// An optimizer shard to the optimizer: its part of the global gradient norm, or (local step)
// the step it took.
struct ShardReport {
  int rank = 0;  // the device's global rank
  int64_t iteration = 0;
  GradStats grads{};
  bool stepped = false;
  StepResult step{};
};

// The optimizer to every optimizer shard: the step's one clip coefficient (or a skip).
struct ShardStep {
  int64_t iteration = 0;
  float lr = 0;
  float loss_scale = 1;
  float clip = 1;
  bool skip = false;
};

// A TensorMessage for a stage actor in another process (through CAF's middleman): the
// tensor itself travels over the channel (MPI or NCCL); this says what to receive.
struct RemoteParcel {
  int64_t iteration = 0;
  int32_t direction = 0;  // Direction
  int32_t microbatch = 0;
  int32_t chunk = 0;
  std::vector<int64_t> shape;
  int32_t dtype = 0;  // DType
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RemoteParcel& x) {
  return f(caf::meta::type_name("troupe.RemoteParcel"), x.iteration, x.direction, x.microbatch, x.chunk, x.shape,
           x.dtype);
}

struct BucketReady {
  int64_t iteration = 0;
  int bucket = 0;
  std::shared_ptr<void> fence;  // after the backward work that wrote it (null on a CPU device)
};

struct BucketsReduced {
  int64_t iteration = 0;
  std::shared_ptr<void> fence;  // after every bucket's reduction (null on a CPU device)
};

// A checkpoint snapshot for the writer (defined in checkpoint_writer_actor.hpp), and one
// device's part of it (stage_optimizer.hpp).
struct SaveJob;
struct StateCopy;

struct StepRequest {
  int64_t iteration = 0;
  float lr = 0;
  float loss_scale = 1;
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::BatchInfo)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StageData)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::IterationPlan)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::TensorMessage)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StageReport)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StepRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::GradsReady)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ShardReport)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ShardStep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::BucketReady)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::BucketsReduced)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::GradStats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::StepResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::IterationStats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::schedules::TraceEvent)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::actors::SaveJob>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::actors::StateCopy>)
