#include "actors/train/optimizer_actor.hpp"

#include <cmath>
#include <limits>
#include <memory>

#include "actors/train/messages.hpp"
#include "actors/train/run_error.hpp"

namespace troupe::actors {

namespace {

class OptimizerActor : public optimizer_actor::base {
 public:
  OptimizerActor(caf::actor_config& cfg, std::vector<stage_update_actor> stages, OptimizerOptions options)
      : optimizer_actor::base(cfg), stages_(std::move(stages)), options_(options) {}

  behavior_type make_behavior() override {
    return {
        [this](step_atom, const StepRequest& req) -> caf::result<StepResult> {
          auto rp = make_response_promise<StepResult>();
          if (req.grads.empty()) {
            rp.deliver(make_run_error(RunError::optimizer, "optimizer step: no gradient statistics"));
            return rp;
          }
          decide(req, rp);
          return rp;
        },
    };
  }

  void on_exit() override { stages_.clear(); }

 private:
  using Promise = caf::typed_response_promise<StepResult>;

  // Counts replies; runs `then` after the last one, or answers the promise with the first error.
  struct Gather {
    size_t left;
    bool failed = false;
  };

  void fail(Promise rp, const std::string& what, const caf::error& e) {
    rp.deliver(make_run_error(RunError::optimizer, str_cat("optimizer step: ", what, ": ", system().render(e))));
  }

  // Optimizer::step's arithmetic over all stages (stage order, so runs are reproducible).
  void decide(const StepRequest& req, Promise rp) {
    GradStats total;
    for (const GradStats& s : req.grads) {
      total.sum_sq += s.sum_sq;
      total.finite = total.finite && s.finite;
    }
    StepResult result;
    float clip = 1.0f;
    if (!total.finite) {
      result.skipped = true;
      result.grad_norm = std::numeric_limits<double>::quiet_NaN();
    } else {
      const double inv_scale = 1.0 / double(req.loss_scale);
      result.grad_norm = total.norm() * inv_scale;
      GradStats unscaled = total;
      unscaled.sum_sq = total.sum_sq * inv_scale * inv_scale;
      clip = clip_coefficient(unscaled, options_.clip_grad);
    }
    auto g = std::make_shared<Gather>(Gather{stages_.size()});
    for (size_t s = 0; s < stages_.size(); ++s) {
      request(stages_[s], options_.timeout, apply_atom::value, req, clip, result.skipped)
          .then(
              [=, this](bool) mutable {
                if (--g->left == 0 && !g->failed) rp.deliver(result);
              },
              [=, this](caf::error& e) mutable {
                if (g->failed) return;
                g->failed = true;
                fail(rp, str_cat("update of stage ", s), e);
              });
    }
  }

  std::vector<stage_update_actor> stages_;
  OptimizerOptions options_;
};

}  // namespace

optimizer_actor spawn_optimizer(caf::actor_system& system, std::vector<stage_update_actor> stages,
                                OptimizerOptions options) {
  return system.spawn<OptimizerActor, caf::detached>(std::move(stages), options);  // see spawn_trainer
}

}  // namespace troupe::actors
