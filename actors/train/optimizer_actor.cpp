#include "actors/train/optimizer_actor.hpp"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "actors/fabric/fabric.hpp"
#include "actors/train/messages.hpp"
#include "actors/train/run_error.hpp"
#include "base/check.hpp"

namespace troupe::actors {

namespace {

class OptimizerActor : public optimizer_actor::base {
 public:
  OptimizerActor(caf::actor_config& cfg, OptimizerSetup setup)
      : optimizer_actor::base(cfg), s_(std::move(setup)), reports_(s_.shards.size()) {}

  behavior_type make_behavior() override {
    return {
        [this](norm_atom, const ShardReport& r) {
          for (size_t i = 0; i < s_.ranks.size(); ++i)
            if (s_.ranks[i] == r.rank) reports_[i] = r;
          maybe_step();
        },
        [this](step_atom, const StepRequest& req) -> caf::result<StepResult> {
          if (pending_.pending())
            return make_run_error(RunError::optimizer, "optimizer step: a step is already running");
          pending_ = make_response_promise<StepResult>();
          request_ = req;
          maybe_step();
          return pending_;
        },
    };
  }

  void on_exit() override {
    s_.shards.clear();
    pending_ = {};
  }

 private:
  using Promise = caf::typed_response_promise<StepResult>;

  // The trainer has asked and every local shard has reported.
  void maybe_step() {
    if (!pending_.pending()) return;
    for (const std::optional<ShardReport>& r : reports_)
      if (!r) return;
    std::vector<ShardReport> parts;
    for (std::optional<ShardReport>& r : reports_) parts.push_back(*std::exchange(r, std::nullopt));
    auto rp = std::exchange(pending_, {});
    for (const ShardReport& r : parts) {
      if (r.iteration != request_.iteration) {
        rp.deliver(make_run_error(RunError::optimizer,
                                  str_cat("optimizer step of iteration ", request_.iteration, ": the shard of rank ",
                                          r.rank, " reported iteration ", r.iteration)));
        return;
      }
    }
    if (parts.size() == 1 && parts.front().stepped) {  // one shard held the whole model: its step
      rp.deliver(parts.front().step);
      return;
    }
    std::optional<GradStats> total = global_stats(parts, rp);
    if (total) decide(*total, rp);
  }

  // The parts summed in rank order (the same sum every run), each rank's from the one process
  // holding it (the others add zeros). A replica's part counts only with the distributed optimizer.
  std::optional<GradStats> global_stats(const std::vector<ShardReport>& parts, Promise& rp) {
    const size_t n = size_t(s_.layout.world());
    std::vector<double> v(3 * n, 0.0);  // sum_sq, counted, not finite: per rank
    for (const ShardReport& r : parts) {
      const size_t i = size_t(r.rank);
      TROUPE_CHECK(i < n, "optimizer: a report of rank ", r.rank, " in a layout of ", n, " ranks");
      if (!s_.distributed_optimizer && (s_.layout.coord(r.rank).dp != 0 || s_.layout.coord(r.rank).cp != 0)) continue;
      v[i] = r.grads.sum_sq;
      v[n + i] = 1.0;
      v[2 * n + i] = r.grads.finite ? 0.0 : 1.0;
    }
    if (s_.fabric && s_.fabric->processes() > 1) {
      try {
        s_.fabric->all_reduce(v, ReduceOp::sum);
      } catch (const std::exception& e) {
        rp.deliver(make_run_error(RunError::reduction,
                                  str_cat("summing the gradient statistics over processes failed: ", e.what())));
        return std::nullopt;
      }
    }
    GradStats total;
    for (size_t i = 0; i < n; ++i) {
      if (v[n + i] == 0) continue;
      total.sum_sq += v[i];
      total.finite = total.finite && v[2 * n + i] == 0;
    }
    return total;
  }

  // Optimizer::step's arithmetic on the global statistics; then every shard applies the one coefficient.
  void decide(const GradStats& total, Promise rp) {
    StepResult result;
    float clip = 1.0f;
    if (!total.finite) {
      result.skipped = true;
      result.grad_norm = std::numeric_limits<double>::quiet_NaN();
    } else {
      const double inv_scale = 1.0 / double(request_.loss_scale);
      result.grad_norm = total.norm() * inv_scale;
      GradStats unscaled = total;
      unscaled.sum_sq = total.sum_sq * inv_scale * inv_scale;
      clip = clip_coefficient(unscaled, s_.clip_grad);
    }
    const ShardStep step{request_.iteration, request_.lr, request_.loss_scale, clip, result.skipped};
    auto left = std::make_shared<size_t>(s_.shards.size());
    auto failed = std::make_shared<bool>(false);
    for (size_t i = 0; i < s_.shards.size(); ++i) {
      request(s_.shards[i], s_.timeout, apply_atom::value, step)
          .then(
              [=](bool) mutable {
                if (--*left == 0 && !*failed) rp.deliver(result);
              },
              [=, this](caf::error& e) mutable {
                if (*failed) return;
                *failed = true;
                rp.deliver(make_run_error(RunError::optimizer, str_cat("optimizer step: the update of rank ",
                                                                       s_.ranks[i], ": ", system().render(e))));
              });
    }
  }

  OptimizerSetup s_;
  std::vector<std::optional<ShardReport>> reports_;  // per local shard, this iteration's
  Promise pending_;                                  // the trainer's step request, if any
  StepRequest request_;
};

}  // namespace

optimizer_actor spawn_optimizer(caf::actor_system& system, OptimizerSetup setup, ActorThread mode) {
  TROUPE_CHECK(setup.shards.size() == setup.ranks.size(), "spawn_optimizer: ", setup.shards.size(), " shards, ",
               setup.ranks.size(), " ranks");
  std::vector<optimizer_shard_actor> shards = setup.shards;
  // Detached (see spawn_trainer): the step is on the critical path between iterations.
  optimizer_actor a = mode == ActorThread::scheduled ? system.spawn<OptimizerActor>(std::move(setup))
                                                     : system.spawn<OptimizerActor, caf::detached>(std::move(setup));
  for (const optimizer_shard_actor& s : shards) caf::anon_send(s, peers_atom::value, shard_listener{a});
  return a;
}

}  // namespace troupe::actors
