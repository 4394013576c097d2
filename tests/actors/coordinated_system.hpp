// An actor system on CAF's test coordinator (scheduler.policy "testing"), for the actor
// protocol tests: actors spawned with ActorThread::scheduled run only when the test steps them
// (sched->run(), sched->try_run_once()); delayed messages wait for sched->advance_time().
//
//   CoordinatedSystem cs(actors::add_run_error_category);   // system.render(e): the sentence
//   auto reply = (*cs.self)->request(actor, caf::infinite, ...);
//   cs.sched->run();
#pragma once

#include <caf/all.hpp>

#include <memory>

namespace troupe::test {

struct CoordinatedSystem {
  explicit CoordinatedSystem(void (*add_error_category)(caf::actor_system_config&) = nullptr) {
    cfg.set("scheduler.policy", caf::atom("testing"));
    if (add_error_category != nullptr) add_error_category(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(system->scheduler());
    self = std::make_unique<caf::scoped_actor>(*system);
  }
  CoordinatedSystem(const CoordinatedSystem&) = delete;
  CoordinatedSystem& operator=(const CoordinatedSystem&) = delete;

  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::unique_ptr<caf::scoped_actor> self;  // the test's own actor (requests, receives)
};

}  // namespace troupe::test
