// The optimizer's and the optimizer shards' protocols (optimizer_actor, optimizer_shard_actor
// in protocols.hpp), stepped one message at a time on CAF's test coordinator.
//
// Optimizer: whatever order the shards' reports and the trainer's step request come in, the
// global norm is the sum of the counted parts (a data-parallel replica counts only with the
// distributed optimizer), the clip coefficient is computed once and every shard gets the same
// one, and inf/nan anywhere skips the step everywhere.
//
// Shard: a checkpoint's state copy requested while the gradient reduction is under way (the
// stage's gradients are in, the reducer's answer is not), or between the report and the step,
// holds the state before the step; one requested after the step holds the state after it.
#include <caf/all.hpp>

#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "actors/train/optimizer_actor.hpp"
#include "actors/train/optimizer_shard_actor.hpp"
#include "actors/train/run_error.hpp"
#include "tests/actors/coordinated_system.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using actors::ActorThread;
using actors::ShardReport;
using actors::ShardStep;

class ProtocolTest : public ::testing::Test {
 protected:
  ProtocolTest() { cs_ = std::make_unique<CoordinatedSystem>(actors::add_run_error_category); }
  ~ProtocolTest() override {
    for (const caf::actor& a : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    cs_->sched->run();
    actors_.clear();
  }
  template <typename Handle>
  Handle keep(Handle h) {
    actors_.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

  std::unique_ptr<CoordinatedSystem> cs_;
  std::vector<caf::actor> actors_;
};

// A stand-in shard: records the steps it is asked to apply.
actors::optimizer_shard_actor::behavior_type recording_shard_fn(actors::optimizer_shard_actor::pointer,
                                                                std::vector<ShardStep>* steps) {
  return {
      [](actors::grads_atom, const actors::GradsReady&) {},
      [](actors::reduced_atom, const actors::BucketsReduced&) {},
      [](actors::peers_atom, const actors::shard_listener&) {},
      [](actors::state_copy_atom, const std::shared_ptr<actors::StateCopy>&) { return true; },
      [steps](actors::apply_atom, const ShardStep& s) {
        steps->push_back(s);
        return true;
      },
  };
}

class OptimizerProtocol : public ProtocolTest {
 protected:
  // Two data ranks of one stage (ranks 0 and 1, layout data = 2).
  void start(bool distributed_optimizer) {
    actors::OptimizerSetup os;
    for (int r = 0; r < 2; ++r) {
      os.shards.push_back(keep(cs_->system->spawn(recording_shard_fn, &steps_[r])));
      os.ranks.push_back(r);
    }
    os.layout = RankLayout{.tensor = 1, .data = 2, .pipeline = 1};
    os.distributed_optimizer = distributed_optimizer;
    os.clip_grad = 1.0f;
    optimizer_ = keep(actors::spawn_optimizer(*cs_->system, std::move(os), ActorThread::scheduled));
    cs_->sched->run();
  }
  void report(int rank, double sum_sq, bool finite = true) {
    caf::anon_send(optimizer_, actors::norm_atom::value,
                   ShardReport{.rank = rank, .iteration = 1, .grads = {sum_sq, finite}});
  }
  StepResult step() {
    auto reply = (*cs_->self)
                     ->request(optimizer_, caf::infinite, actors::step_atom::value,
                               actors::StepRequest{.iteration = 1, .lr = 0.5f, .loss_scale = 2.0f});
    cs_->sched->run();
    StepResult result;
    if ((*cs_->self)->mailbox().empty()) {
      ADD_FAILURE() << "the optimizer did not answer";
      return result;
    }
    reply.receive([&](StepResult& r) { result = r; }, [&](caf::error& e) { ADD_FAILURE() << cs_->system->render(e); });
    return result;
  }

  std::vector<ShardStep> steps_[2];
  actors::optimizer_actor optimizer_;
};

TEST_F(OptimizerProtocol, OneClipCoefficientForEveryShardWhateverTheOrder) {
  start(/*distributed_optimizer=*/true);
  report(1, 48.0);
  cs_->sched->run();
  EXPECT_TRUE(steps_[0].empty() && steps_[1].empty()) << "no step before the trainer asks";
  auto reply = (*cs_->self)
                   ->request(optimizer_, caf::infinite, actors::step_atom::value,
                             actors::StepRequest{.iteration = 1, .lr = 0.5f, .loss_scale = 2.0f});
  cs_->sched->run();
  EXPECT_TRUE(steps_[0].empty()) << "no step before every shard has reported";
  report(0, 16.0);
  cs_->sched->run();
  StepResult result;
  reply.receive([&](StepResult& r) { result = r; }, [&](caf::error& e) { ADD_FAILURE() << cs_->system->render(e); });
  // Both shards' parts count (each owns its shard): norm sqrt(64) = 8, unscaled by 1/2: 4.
  EXPECT_DOUBLE_EQ(result.grad_norm, 4.0);
  EXPECT_FALSE(result.skipped);
  const float clip = clip_coefficient({.sum_sq = 16.0, .finite = true}, 1.0f);
  for (const auto& steps : steps_) {
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0].clip, clip);
    EXPECT_FLOAT_EQ(steps[0].lr, 0.5f);
    EXPECT_FLOAT_EQ(steps[0].loss_scale, 2.0f);
    EXPECT_FALSE(steps[0].skip);
  }
}

TEST_F(OptimizerProtocol, AReplicaCountsOnlyWithTheDistributedOptimizer) {
  start(/*distributed_optimizer=*/false);
  report(0, 36.0);
  report(1, 36.0);  // the same all-reduced gradients: counted once
  EXPECT_DOUBLE_EQ(step().grad_norm, 3.0);
}

TEST_F(OptimizerProtocol, InfOrNanAnywhereSkipsTheStepEverywhere) {
  start(/*distributed_optimizer=*/true);
  report(0, 4.0);
  report(1, 0.0, /*finite=*/false);
  const StepResult result = step();
  EXPECT_TRUE(result.skipped);
  EXPECT_TRUE(std::isnan(result.grad_norm));
  for (const auto& steps : steps_) {
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_TRUE(steps[0].skip);
  }
}

// The optimizer as a shard sees it: keeps the reports.
actors::shard_listener::behavior_type recording_optimizer_fn(actors::shard_listener::pointer,
                                                             std::vector<ShardReport>* reports) {
  return {[reports](actors::norm_atom, const ShardReport& r) { reports->push_back(r); }};
}

class ShardProtocol : public ProtocolTest {
 protected:
  ShardProtocol() {
    actors::StageSetup setup;
    setup.context = std::make_unique<Context>(Context::cpu());
    auto chunk = std::make_unique<GptChunk>(*setup.context, tiny_model(false), ChunkSpec::whole_model(), DType::f32);
    chunk->init_weights(7);
    setup.models.push_back(std::move(chunk));
    setup.dp_size = 2;
    setup.overlap_grad_reduce = true;
    worker_ = std::make_shared<actors::StageWorker>(std::move(setup));
    std::vector<std::unique_ptr<Optimizer>> optimizers;
    optimizers.push_back(std::make_unique<Optimizer>(worker_->model(0), OptimizerConfig{}));
    state_ = std::make_shared<actors::StageOptimizer>(worker_, std::move(optimizers), std::vector<std::string>{""});
    shard_ =
        keep(actors::spawn_optimizer_shard(*cs_->system, {state_, 0, /*awaits_reducer=*/true}, ActorThread::scheduled));
    optimizer_ = keep(cs_->system->spawn(recording_optimizer_fn, &reports_));
    caf::anon_send(shard_, actors::peers_atom::value, optimizer_);
    cs_->sched->run();
    // Some gradient to step with.
    const Tensor& g = worker_->model(0).grads();
    for (int64_t i = 0; i < g.numel(); ++i) g.data_as<float>()[i] = 0.01f * float(i % 7 - 3);
  }

  std::vector<float> params() const {
    const Tensor& p = worker_->model(0).params();
    return {p.data_as<float>(), p.data_as<float>() + p.numel()};
  }

  // A checkpoint's copy of the shard's state, requested now (handled in mailbox order), and
  // the handle of the answer.
  auto request_copy(std::shared_ptr<actors::StateCopy>& copy) {
    copy = std::make_shared<actors::StateCopy>();
    copy->staging = [this](int64_t numel) -> const Tensor& {
      staging_.push_back(Tensor::host(DType::f32, {numel}));
      return staging_.back();
    };
    return (*cs_->self)->request(shard_, caf::infinite, actors::state_copy_atom::value, copy);
  }
  template <typename Reply>
  void expect_true(Reply& reply) {
    bool ok = false;
    reply.receive([&](bool b) { ok = b; }, [&](caf::error& e) { ADD_FAILURE() << cs_->system->render(e); });
    EXPECT_TRUE(ok);
  }
  static std::vector<float> master(const actors::StateCopy& c) {
    const Tensor& t = c.chunks.at(0).tensors.at(0).second;
    return {t.data_as<float>(), t.data_as<float>() + t.numel()};
  }

  std::shared_ptr<actors::StageWorker> worker_;
  std::shared_ptr<actors::StageOptimizer> state_;
  actors::optimizer_shard_actor shard_;
  actors::shard_listener optimizer_;
  std::vector<ShardReport> reports_;
  std::deque<Tensor> staging_;  // stable addresses
};

TEST_F(ShardProtocol, ACheckpointDuringAReductionHoldsTheStateOfAWholeStep) {
  const std::vector<float> before = params();
  caf::anon_send(shard_, actors::grads_atom::value, actors::GradsReady{.iteration = 1});
  cs_->sched->run();
  EXPECT_TRUE(reports_.empty()) << "the shard waits for the reducer's answer";
  std::shared_ptr<actors::StateCopy> during_reduction, before_step, after_step;
  auto r1 = request_copy(during_reduction);
  cs_->sched->run();
  caf::anon_send(shard_, actors::reduced_atom::value, actors::BucketsReduced{1, nullptr});
  cs_->sched->run();
  ASSERT_EQ(reports_.size(), 1u) << "the reducer's answer completes the gradients";
  EXPECT_EQ(reports_[0].iteration, 1);
  EXPECT_GT(reports_[0].grads.sum_sq, 0.0);
  auto r2 = request_copy(before_step);
  auto step = (*cs_->self)
                  ->request(shard_, caf::infinite, actors::apply_atom::value,
                            ShardStep{.iteration = 1, .lr = 0.1f, .loss_scale = 1, .clip = 1, .skip = false});
  auto r3 = request_copy(after_step);
  cs_->sched->run();
  expect_true(r1);
  expect_true(r2);
  expect_true(step);
  expect_true(r3);
  const std::vector<float> after = params();
  ASSERT_NE(after, before) << "the step changed the parameters";
  EXPECT_EQ(master(*during_reduction), before);
  EXPECT_EQ(during_reduction->step, 0);
  EXPECT_EQ(master(*before_step), before);
  EXPECT_EQ(before_step->step, 0);
  EXPECT_EQ(master(*after_step), after);
  EXPECT_EQ(after_step->step, 1);
  ASSERT_EQ(during_reduction->chunks.at(0).tensors.size(), 3u) << "master weights and both moments";
}

}  // namespace
}  // namespace troupe::test
