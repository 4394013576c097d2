// The trainer actor: runs iterations for the blocking TrainingRun API. On train_atom it
// gets the iteration's microbatches from the data-loader actor (asked for while the previous
// iteration ran), counts the target tokens
// (the loss is a per-token mean over the global batch), sends every stage its plan (stage 0
// the tokens, the last stage the targets), waits for every stage's report (its loss; the
// gradients went to the optimizer shards), asks the optimizer actor for the step and answers
// IterationStats. eval_atom runs forward-only
// microbatches and answers the mean loss. Any failure (a stage's fail message, an actor
// going down, a stage silent past op_timeout) answers the request with a caf::error
// (run_error.hpp) and poisons the run. It monitors every other actor, keeps the watchdog, and
// writes the trace. Protocol: trainer_actor (protocols.hpp).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include "actors/train/clock_sampler.hpp"
#include "actors/train/process_heartbeat.hpp"
#include "actors/train/protocols.hpp"
#include "model/rank_layout.hpp"
#include "model/train/loss_scaler.hpp"
#include "model/train/lr_schedule.hpp"
#include "schedules/trace.hpp"

namespace troupe::actors {

class Fabric;

struct TrainerSetup {
  // One stage actor per device, indexed by global rank (layout: Megatron's rank order).
  std::vector<stage_actor> stages;
  RankLayout layout;
  int loss_stage = -1;  // the stage holding the LM head and loss (its reports carry the loss); -1: the last
  // Several processes: each runs a trainer for its own stage actors (ranks [first_local,
  // first_local + local_count)); the losses and gradient statistics are summed over processes
  // through the fabric, in rank order, so every process takes the same step.
  std::shared_ptr<Fabric> fabric;
  size_t first_local = 0, local_count = 0;  // local_count 0: every stage is local
  // This process's gradient reducers and optimizer shards, by rank from first_local (monitored:
  // one going down fails the run).
  std::vector<grad_reducer_actor> reducers;
  std::vector<optimizer_shard_actor> shards;
  loader_actor loader;
  optimizer_actor optimizer;
  int microbatches = 1;  // of the global batch (each data rank runs microbatches / D of them)
  int64_t micro_batch_size = 1, seq_length = 1;
  uint64_t seed = 1234;
  LrSchedule lr;
  std::shared_ptr<LossScaler> scaler;  // null: no loss scaling
  int64_t first_iteration = 0;         // iterations already done (resumed runs)
  std::chrono::milliseconds op_timeout{std::chrono::minutes(5)};
  // Several processes: when each other process was last heard from; the watchdog fails the run
  // when one is silent longer than heartbeat_timeout. Null: one process.
  std::shared_ptr<const HeartbeatBoard> heartbeat;
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(20)};
  std::shared_ptr<schedules::TraceWriter> trace;  // null: off
  // Traced runs on GPUs: the samples of each local GPU's clock, written with each iteration.
  std::shared_ptr<ClockSampler> clocks;
  std::chrono::steady_clock::time_point epoch;
};

trainer_actor spawn_trainer(caf::actor_system& system, TrainerSetup setup, ActorThread mode = ActorThread::detached);

}  // namespace troupe::actors
