// The optimizer actor: turns the optimizer shards' gradient statistics into one optimizer
// step. Each shard (optimizer_shard_actor.hpp) sends its part of the global norm once its
// gradients are final; on (step_atom, StepRequest) from the trainer, once every local shard's
// part is in, it (1) sums them (over processes too, through the fabric) into the GLOBAL norm,
// in rank order, the tied copy counted once, as on one device, (2) decides skip (inf/nan) or
// the clip coefficient, once, and (3) sends that one coefficient to every local shard, which
// applies AdamW. Answers StepResult {skipped, grad_norm (unscaled)}. A shard holding the whole
// model takes the whole step itself (IterationPlan::local_step) and its result is the answer.
// Protocol: optimizer_actor (protocols.hpp); a failed update answers RunError::optimizer.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include "actors/train/protocols.hpp"
#include "model/rank_layout.hpp"

namespace troupe::actors {

class Fabric;

struct OptimizerSetup {
  std::vector<optimizer_shard_actor> shards;  // this process's shards ...
  std::vector<int> ranks;                     // ... and their devices' global ranks
  RankLayout layout;
  // Replicas hold the same (all-reduced) gradients, unless each owns a shard of them.
  bool distributed_optimizer = false;
  std::shared_ptr<Fabric> fabric;  // several processes: the parts are summed over them (null: one)
  float clip_grad = 1.0f;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per request to a shard
};

// Also tells every shard where to report (peers_atom), before it returns.
optimizer_actor spawn_optimizer(caf::actor_system& system, OptimizerSetup setup,
                                ActorThread mode = ActorThread::detached);

}  // namespace troupe::actors
