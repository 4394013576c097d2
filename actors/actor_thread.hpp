// How an actor runs: on its own thread (production: it blocks on a socket, a file, a collective
// or a device) or on the scheduler, so that CAF's test coordinator (scheduler.policy
// "testing"), which does not run detached actors, can step it message by message.
//
//   monitor_actor m = spawn_monitor(system, options, hello, {}, ActorThread::scheduled).monitor;
#pragma once

#include <cstdint>

namespace troupe::actors {

enum class ActorThread : uint8_t { detached, scheduled };

}  // namespace troupe::actors
