// The data-loader actor: owns the training and validation DataLoaders (spawned detached:
// reading samples is file I/O) and feeds the stages that consume data directly: the inputs to
// every device holding virtual stage 0, the labels (targets = labels, -1 where the loss mask
// is 0) to every device holding the last one. On (batch_atom, iteration, train, count) from the
// trainer it reads `count` microbatches, sends each such stage its share as StageData (data
// rank d of a training batch takes microbatches d, d + D, ...: Megatron's order; evaluation
// runs on data rank 0 only, which takes them all) and answers the trainer with the counts it
// needs for the plan. After each training batch it reads the next one ahead, so the next
// iteration's data is ready when the trainer asks. Protocol: loader_actor (protocols.hpp);
// failures answer RunError::data.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <vector>

#include "actors/train/protocols.hpp"
#include "data/data_loader.hpp"

namespace troupe::actors {

// A stage the loader feeds (one of this process's).
struct LoaderFeed {
  data_listener stage;
  int dp = 0;            // its data rank
  bool tokens = false;   // holds virtual stage 0: takes the inputs
  bool targets = false;  // holds the last virtual stage: takes the labels
};

struct LoaderSetup {
  std::unique_ptr<DataLoader> train, valid;  // valid may be null (no evaluation)
  std::vector<LoaderFeed> feeds;
  int data_parallel = 1;  // D
  // The data ranks evaluation runs on, microbatch k on rank k mod this: 1, or the data ranks the
  // expert groups span (RankLayout::expert_group_data_ranks; an expert group runs forwards together).
  int eval_data_parallel = 1;
};

loader_actor spawn_loader(caf::actor_system& system, LoaderSetup setup, ActorThread mode = ActorThread::detached);

}  // namespace troupe::actors
