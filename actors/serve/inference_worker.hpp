// An inference worker: owns one model replica (an InferenceModel and its InferenceEngine on one
// device, or a tensor-parallel group of them), steps its engine while it has requests and takes
// new ones between steps, so a request that arrives while others decode joins the batch at the
// next step. Detached in production: one thread drives its device.
//
// Protocol: inference_worker_actor (actors/serve/protocols.hpp): (submit_atom, Submission) from
// the router; (finished_atom, index) to the router as each request ends, and (retired_atom,
// index, error) when a tensor-parallel replica's step failed (it leaves service); a request that
// cannot run ends in its on_error with a ServeError (serve_error.hpp).
//
//   inference_worker_actor w = spawn_inference_worker(system, std::move(replica), 0, router, &free_blocks);
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>

#include "actors/actor_thread.hpp"
#include "actors/serve/inference_pool.hpp"
#include "actors/serve/protocols.hpp"

namespace troupe::actors {

// `index`: the worker's place in the router's list. `free_blocks`: where the worker stores its
// engine's free KV blocks after each step (the pool's view; must outlive the worker). Builds
// the engine on the caller's thread. `thread`: detached in production; scheduled for tests on
// CAF's test coordinator.
inference_worker_actor spawn_inference_worker(caf::actor_system& system, InferenceReplica replica, int index,
                                              worker_listener router, std::atomic<int64_t>* free_blocks,
                                              ActorThread thread = ActorThread::detached);

}  // namespace troupe::actors
