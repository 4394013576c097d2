#include "actors/fabric/message_latency.hpp"

#include <caf/all.hpp>

#include <chrono>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using start_atom = caf::atom_constant<caf::atom("start")>;

// Pong: (ping_atom, int64 i) from ping; sends (pong_atom, i) back to the sender.
using pong_actor = caf::typed_actor<caf::reacts_to<ping_atom, int64_t>>;

// Whoever starts ping (the measuring scoped actor): gets the total time in ns.
using latency_listener = caf::typed_actor<caf::reacts_to<double>>;

// Ping: (start_atom, pong, int64 n) from the measuring actor: n round trips with pong, then the
// total time (double, ns) to that sender; (pong_atom, int64 i) from pong: one round trip done.
using ping_actor =
    caf::typed_actor<caf::reacts_to<start_atom, pong_actor, int64_t>, caf::reacts_to<pong_atom, int64_t>>;

pong_actor::behavior_type pong_fn(pong_actor::pointer self) {
  return {[self](ping_atom, int64_t i) {
    self->send(caf::actor_cast<ping_actor>(self->current_sender()), pong_atom::value, i);
  }};
}

struct PingState {
  int64_t left = 0;
  std::chrono::steady_clock::time_point t0;
  pong_actor pong;
  latency_listener report_to;
};

ping_actor::behavior_type ping_fn(ping_actor::stateful_pointer<PingState> self) {
  return {
      [self](start_atom, pong_actor pong, int64_t n) {
        self->state.pong = pong;
        // A sender is untyped in CAF: the measuring actor handles the double it is sent.
        self->state.report_to = caf::actor_cast<latency_listener>(self->current_sender());
        self->state.left = n;
        self->state.t0 = std::chrono::steady_clock::now();
        self->send(pong, ping_atom::value, int64_t(0));
      },
      [self](pong_atom, int64_t i) {
        if (--self->state.left > 0) {
          self->send(self->state.pong, ping_atom::value, i + 1);
          return;
        }
        const double ns = double(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - self->state.t0)
                .count());
        self->send(self->state.report_to, ns);
        self->state.pong = nullptr;
        self->state.report_to = nullptr;
      },
  };
}

template <caf::spawn_options Options>
double round_trip_us(caf::actor_system& system, int64_t n) {
  caf::scoped_actor self{system};
  pong_actor pong = system.spawn<Options>(pong_fn);
  ping_actor ping = system.spawn<Options>(ping_fn);
  double ns = 0;
  self->send(ping, start_atom::value, pong, n);
  self->receive(
      [&](double total_ns) { ns = total_ns; },
      caf::after(std::chrono::seconds(60)) >> [&] { TROUPE_FAIL("message round trips did not finish in 60 s"); });
  self->send_exit(ping, caf::exit_reason::user_shutdown);
  self->send_exit(pong, caf::exit_reason::user_shutdown);
  return ns / double(n) / 1000.0;
}

}  // namespace

MessageLatency measure_message_latency(int64_t round_trips) {
  TROUPE_CHECK(round_trips >= 1, "measure_message_latency: round_trips must be >= 1");
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system system{cfg};
  MessageLatency r;
  r.round_trips = round_trips;
  round_trip_us<caf::no_spawn_options>(system, std::min<int64_t>(round_trips, 1000));  // warm-up
  r.scheduled_us = round_trip_us<caf::no_spawn_options>(system, round_trips);
  r.detached_us = round_trip_us<caf::detached>(system, round_trips);
  return r;
}

}  // namespace troupe::actors
