// The optimizer shard actor: one per device, on its own thread. It owns the device's f32
// master weights and Adam moments (a StageOptimizer: with the distributed optimizer, this
// data rank's shard of them). When its stage says the iteration's ops have run (GradsReady)
// and, with --overlap-grad-reduce, its gradient reducer says every bucket's reduction is under
// way (BucketsReduced), it finishes the gradient reduction and sends the optimizer its part of
// the global norm; the optimizer answers with the step's one clip coefficient (ShardStep) and
// the shard applies AdamW (and all-gathers its updated parameter shard).
//
// Its device work goes on the stage's stream while the stage actor is idle: the stage has
// run its last op, and its next plan comes only after the optimizer's step has been answered.
//
// Protocol: optimizer_shard_actor (protocols.hpp). A failure ends the actor with
// RunError::optimizer ("the optimizer shard of stage 1 failed: ..."), which its monitors see.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/train/protocols.hpp"
#include "actors/train/stage_optimizer.hpp"

namespace troupe::actors {

struct OptimizerShardSetup {
  std::shared_ptr<StageOptimizer> optimizer;
  int rank = 0;                 // the device's global rank (ShardReport::rank)
  bool awaits_reducer = false;  // a gradient reducer reduces this device's buckets: wait for its BucketsReduced
};

optimizer_shard_actor spawn_optimizer_shard(caf::actor_system& system, OptimizerShardSetup setup,
                                            ActorThread mode = ActorThread::detached);

}  // namespace troupe::actors
