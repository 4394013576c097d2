// The cost of one actor message in the runtime: the round trip of a small message between
// two actors of a fresh actor system (ping -> pong -> ping), for scheduled actors (the CAF
// work-stealing pool) and for detached actors (one thread each, like our stage actors, so
// every hop is a thread wake-up). bench/runtime_overhead prints these.
#pragma once

#include <cstdint>

namespace troupe::actors {

struct MessageLatency {
  double scheduled_us = 0;  // mean round trip, both actors scheduled
  double detached_us = 0;   // mean round trip, both actors detached
  int64_t round_trips = 0;
};

MessageLatency measure_message_latency(int64_t round_trips);

}  // namespace troupe::actors
