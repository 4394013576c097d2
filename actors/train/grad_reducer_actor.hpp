// The gradient bucket reducer actor (--overlap-grad-reduce): one per device of a data-parallel
// run, on its own thread and (on a GPU) its own stream. Its stage actor hands it each bucket
// as soon as the last microbatch's backward has written it (behind a fence); the reducer
// makes its stream wait for the fence and starts the bucket's all-reduce (reduce-scatter with
// the distributed optimizer) there, so the reduction overlaps the rest of backward. Buckets
// start in a fixed order (make_grad_buckets'), whatever order they become ready in, so every
// data rank issues the same sequence of collectives. Once the last bucket is under way it
// tells the device's optimizer shard, with a fence after all of them.
//
// Protocol: grad_reducer_actor (protocols.hpp): (bucket_atom, BucketReady) from the stage;
// (reduced_atom, BucketsReduced) to the optimizer shard.
// A failed collective ends the actor with the error, RunError::reduction (the trainer sees it go down).
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <vector>

#include "actors/train/protocols.hpp"
#include "actors/train/stage_worker.hpp"
#include "kernels/collectives.hpp"

namespace troupe::actors {

struct GradReducerSetup {
  std::shared_ptr<StageWorker> worker;  // its buckets and chunks (their gradient buffers)
  const Context* comm = nullptr;        // the reducer's stream on the worker's device
  Collectives* group = nullptr;         // the data-parallel group, used from this actor only (routed
                                        // experts' buckets: the worker's expert-data-parallel group)
  reduced_listener listener;            // the device's optimizer shard
};

grad_reducer_actor spawn_grad_reducer(caf::actor_system& system, GradReducerSetup setup,
                                      ActorThread mode = ActorThread::detached);

}  // namespace troupe::actors
