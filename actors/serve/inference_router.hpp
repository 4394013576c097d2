// The inference pool's router: sends each request to the worker in service with the fewest in
// flight, counts what each worker has in flight (it hears when each request ends) and which
// workers left service. Scheduled: it never blocks, and only forwards.
//
// Protocol: inference_router_actor (actors/serve/protocols.hpp): (workers_atom, workers) once
// from the pool, then (submit_atom, Submission) per request; (finished_atom, worker) and
// (retired_atom, worker, error) from the workers; (serving_atom, reporter) with a monitor.
//
//   inference_router_actor router = spawn_inference_router(system);
//   caf::anon_send(router, workers_atom::value, workers);
#pragma once

#include <caf/all.hpp>

#include "actors/serve/protocols.hpp"

namespace troupe::actors {

inference_router_actor spawn_inference_router(caf::actor_system& system);

}  // namespace troupe::actors
