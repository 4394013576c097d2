// The serving actors' interfaces as caf::typed_actor (as actors/train/protocols.hpp does for
// the training actors): what each actor accepts, who sends it, and what it answers. A handle of
// one of these types only sends what the actor handles (a wrong message does not compile), and
// an actor deriving from `X::base` (or a function returning `X::behavior_type`) must handle
// every message of X. A request ends in its own callbacks (tokens, or a ServeError from
// serve_error.hpp), not in a CAF answer: the HTTP threads that wait for it are outside the
// actor system. Payloads: pool_request.hpp (Submission), serving_stats.hpp (WorkerServingReport).
//
//   inference_router_actor router = spawn_inference_router(system);
//   caf::anon_send(router, workers_atom::value, workers);                // once, first
//   caf::anon_send(router, submit_atom::value, Submission{request});    // ends in its callbacks
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <vector>

#include "actors/monitor/protocols.hpp"
#include "actors/serve/pool_request.hpp"
#include "actors/serve/serving_stats.hpp"

namespace troupe::actors {

using submit_atom = caf::atom_constant<caf::atom("submit")>;
using advance_atom = caf::atom_constant<caf::atom("advance")>;
using finished_atom = caf::atom_constant<caf::atom("finished")>;
using workers_atom = caf::atom_constant<caf::atom("workers")>;
using retired_atom = caf::atom_constant<caf::atom("retired")>;
using serving_atom = caf::atom_constant<caf::atom("serving")>;
using in_flight_atom = caf::atom_constant<caf::atom("in_flight")>;
using serving_tick_atom = caf::atom_constant<caf::atom("serve_tick")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;

// The serving reporter (serving_monitor.hpp), scheduled, in front of the monitor actor:
//   (serving_atom, WorkerServingReport)  from each worker after an engine step (throttled)
//   (in_flight_atom, int64 requests)     from the router, whenever its count changes
//   (flush_atom) -> bool                 from ServingMonitor::end: publish the `serving` record
//                                        now; true once it is in the monitor's mailbox
//   (serving_tick_atom)                  to itself, every kServingInterval: publish the record
//   (bool)                               the monitor's answer to each publish (nothing to do)
using serving_reporter_actor =
    caf::typed_actor<caf::reacts_to<serving_atom, WorkerServingReport>, caf::reacts_to<in_flight_atom, int64_t>,
                     caf::replies_to<flush_atom>::with<bool>, caf::reacts_to<serving_tick_atom>, caf::reacts_to<bool>>;

// The router as a worker sees it:
//   (finished_atom, int worker)             a request of that worker ended (its last token, a
//                                           refusal or a failure): one fewer in flight there
//   (retired_atom, int worker, caf::error)  the worker left service (a tensor-parallel replica
//                                           whose step failed; ServeError::out_of_service),
//                                           sent before any of its callers hear of the failure
using worker_listener =
    caf::typed_actor<caf::reacts_to<finished_atom, int>, caf::reacts_to<retired_atom, int, caf::error>>;

// An inference worker (inference_worker.hpp), one per replica, detached:
//   (submit_atom, Submission)               from the router: the request joins its engine's
//                                           batch at the next step. One the engine refuses
//                                           fails with ServeError::rejected; one routed here
//                                           after it retired, with ServeError::out_of_service
//   (serving_atom, serving_reporter_actor)  from InferencePool::start_monitor: report there
//   (advance_atom)                          to itself: one engine step, and another while
//                                           requests remain. A failed step fails every request
//                                           it ran with ServeError::worker_failed
using inference_worker_actor =
    caf::typed_actor<caf::reacts_to<submit_atom, Submission>, caf::reacts_to<serving_atom, serving_reporter_actor>,
                     caf::reacts_to<advance_atom>>;

// The router (inference_router.hpp), scheduled: what its workers send (worker_listener), and
// from InferencePool
//   (workers_atom, vector<inference_worker_actor>)  once, before any request: the workers by index
//   (submit_atom, Submission)               a request: to the worker in service with the fewest
//                                           in flight (the first of those on a tie); with none
//                                           in service it fails with ServeError::out_of_service
//   (serving_atom, serving_reporter_actor)  from start_monitor: report the requests in flight there
using inference_router_actor =
    worker_listener::extend<caf::reacts_to<workers_atom, std::vector<inference_worker_actor>>,
                            caf::reacts_to<submit_atom, Submission>,
                            caf::reacts_to<serving_atom, serving_reporter_actor>>;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::WorkerServingReport)
