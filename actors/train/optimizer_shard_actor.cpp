#include "actors/train/optimizer_shard_actor.hpp"

#include <optional>
#include <string>
#include <utility>

#include "actors/fabric/device_services.hpp"
#include "actors/actor_error.hpp"
#include "actors/train/messages.hpp"
#include "actors/train/run_error.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

class OptimizerShardActor : public optimizer_shard_actor::base {
 public:
  OptimizerShardActor(caf::actor_config& cfg, OptimizerShardSetup setup)
      : optimizer_shard_actor::base(cfg), s_(std::move(setup)) {}

  behavior_type make_behavior() override {
    set_exception_handler(
        [name = s_.optimizer->worker().name()](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
          const std::string what = exception_text(eptr);
          return make_run_error(RunError::optimizer, str_cat("the optimizer shard of ", name, " failed: ", what));
        });
    return {
        [this](peers_atom, shard_listener optimizer) { optimizer_ = std::move(optimizer); },
        [this](grads_atom, const GradsReady& g) {
          grads_ = g;
          maybe_report();
        },
        [this](reduced_atom, BucketsReduced& r) {
          reduced_ = std::move(r);
          maybe_report();
        },
        [this](state_copy_atom, const std::shared_ptr<StateCopy>& copy) -> bool {
          s_.optimizer->copy_state(*copy);
          return true;
        },
        [this](apply_atom, const ShardStep& step) -> bool {
          StageOptimizer& opt = *s_.optimizer;
          opt.context().activate();
          if (step.skip)
            opt.skip();
          else
            opt.apply(step.lr, step.clip, step.loss_scale);
          return true;
        },
    };
  }

  void on_exit() override { optimizer_ = nullptr; }

 private:
  // Both halves of the iteration's gradients are in: the stage's ops, the reducer's buckets.
  void maybe_report() {
    if (!grads_) return;
    if (s_.awaits_reducer) {
      if (!reduced_) return;
      TROUPE_CHECK(reduced_->iteration == grads_->iteration, "the gradient reducer answered iteration ",
                   reduced_->iteration, " during iteration ", grads_->iteration);
    }
    const GradsReady g = *std::exchange(grads_, std::nullopt);
    StageOptimizer& opt = *s_.optimizer;
    opt.context().activate();
    if (reduced_) fence_wait(opt.context(), std::exchange(reduced_, std::nullopt)->fence);
    ShardReport report{.rank = s_.rank, .iteration = g.iteration};
    opt.finalize_grads();  // also on one device: the delayed FP8 scales follow the step's amaxes
    if (g.local_step) {
      report.stepped = true;
      report.step = opt.step_whole_model(g.lr, g.loss_scale);
    } else {
      report.grads = opt.grad_stats();
    }
    // spawn_optimizer enqueued the peers message before any stage could finish an iteration.
    TROUPE_CHECK(optimizer_, "an optimizer shard reported before it knew the optimizer");
    send(optimizer_, norm_atom::value, report);
  }

  OptimizerShardSetup s_;
  shard_listener optimizer_;
  std::optional<GradsReady> grads_;        // the stage's message of this iteration
  std::optional<BucketsReduced> reduced_;  // the reducer's
};

}  // namespace

optimizer_shard_actor spawn_optimizer_shard(caf::actor_system& system, OptimizerShardSetup setup, ActorThread mode) {
  TROUPE_CHECK(setup.optimizer != nullptr, "spawn_optimizer_shard: no optimizer state");
  if (mode == ActorThread::scheduled) return system.spawn<OptimizerShardActor>(std::move(setup));
  // Detached: it waits on its device (the gradient statistics come to the host).
  return system.spawn<OptimizerShardActor, caf::detached>(std::move(setup));
}

}  // namespace troupe::actors
