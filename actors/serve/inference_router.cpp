#include "actors/serve/inference_router.hpp"

#include <string>
#include <vector>

#include "actors/serve/serve_error.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

struct RouterState {
  std::vector<inference_worker_actor> workers;
  std::vector<int64_t> in_flight;
  std::vector<caf::error> retired;  // per worker: why it left service (no error while in service)
  caf::error last_retired;          // the latest of those reasons
  serving_reporter_actor reporter;  // the serving monitor's reporter; null: not monitored
};

using RouterSelf = inference_router_actor::stateful_pointer<RouterState>;

// The requests in flight, to the serving monitor.
void report_in_flight(RouterSelf self) {
  const RouterState& st = self->state;
  int64_t n = 0;
  for (int64_t x : st.in_flight) n += x;
  if (st.reporter) self->send(st.reporter, in_flight_atom::value, n);
}

inference_router_actor::behavior_type router_fn(RouterSelf self) {
  return {
      [self](workers_atom, std::vector<inference_worker_actor> workers) {
        self->state.workers = std::move(workers);
        self->state.in_flight.assign(self->state.workers.size(), 0);
        self->state.retired.assign(self->state.workers.size(), caf::error{});
      },
      [self](submit_atom, const Submission& s) {
        RouterState& st = self->state;
        size_t w = st.workers.size();  // the worker in service with the fewest in flight
        for (size_t i = 0; i < st.workers.size(); ++i)
          if (!st.retired[i] && (w == st.workers.size() || st.in_flight[i] < st.in_flight[w])) w = i;
        if (w == st.workers.size()) {
          if (s.r->on_error)
            s.r->on_error(make_serve_error(
                ServeError::out_of_service,
                str_cat("every inference replica is out of service (", self->system().render(st.last_retired), ")")));
          return;
        }
        ++st.in_flight[w];
        self->send(st.workers[w], submit_atom::value, s);
        report_in_flight(self);
      },
      [self](retired_atom, int worker, const caf::error& why) {
        self->state.retired[size_t(worker)] = why;
        self->state.last_retired = why;
      },
      [self](finished_atom, int worker) {
        --self->state.in_flight[size_t(worker)];
        report_in_flight(self);
      },
      [self](serving_atom, serving_reporter_actor reporter) { self->state.reporter = std::move(reporter); },
  };
}

}  // namespace

inference_router_actor spawn_inference_router(caf::actor_system& system) { return system.spawn(router_fn); }

}  // namespace troupe::actors
