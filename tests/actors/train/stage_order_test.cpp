// Message orders that are rare on real hardware, forced on CAF's test coordinator with the
// real training actors (stages, optimizer shards, optimizer, loader, trainer) of a two-stage
// CPU pipeline, and checked against the same pipeline run in the natural order: the same loss
// and bit-identical parameters after the step.
//
// A gradient arriving before its forward finished: stage 0's op completions are held (as a
// GPU's host callbacks may come late) while stage 1 runs the forward and backward of the
// microbatches stage 0 sent it; stage 0 takes their gradients while its forwards still count
// as running, then learns of its completions newest first.
#include <caf/all.hpp>

#include <memory>
#include <optional>
#include <vector>

#include "actors/train/loader_actor.hpp"
#include "actors/train/optimizer_actor.hpp"
#include "actors/train/optimizer_shard_actor.hpp"
#include "actors/train/run_error.hpp"
#include "actors/train/stage_actor.hpp"
#include "actors/train/trainer_actor.hpp"
#include "tests/actors/coordinated_system.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using actors::ActorThread;
using schedules::Op;
using schedules::OpKind;

// Keeps every op's completion until the test releases it.
class HeldCompletions final : public actors::CompletionQueue {
 public:
  void op_begin() override {}
  void op_end(std::function<void(actors::OpTimes)> done) override { held.push_back(std::move(done)); }
  // The reverse of the order the ops were enqueued in; how many there were.
  size_t release_newest_first() {
    std::vector<std::function<void(actors::OpTimes)>> out;
    out.swap(held);
    for (auto it = out.rbegin(); it != out.rend(); ++it) (*it)({});
    return out.size();
  }
  std::vector<std::function<void(actors::OpTimes)>> held;
};

constexpr int kStages = 2, kMicrobatches = 4, kMicroBatchSize = 2;

// The actors of one training run with two CPU stages, every one on the test coordinator.
class TwoStageRun {
 public:
  explicit TwoStageRun(bool hold_stage0) {
    cs_ = std::make_unique<CoordinatedSystem>(actors::add_run_error_category);
    const actors::TrainingConfig config = tiny_config(false, kStages, 1, kMicrobatches);
    GptConfig model = config.model;
    model.untie_embeddings_and_output_weights = true;  // no tied pair to sum between the stages
    const int layers = model.num_layers / kStages;
    for (int s = 0; s < kStages; ++s) {
      actors::StageSetup setup;
      setup.stage = s;
      setup.stages = kStages;
      setup.context = std::make_unique<Context>(Context::cpu());
      auto chunk =
          std::make_unique<GptChunk>(*setup.context, model, ChunkSpec{s * layers, layers, s == 0, s == 1}, DType::f32);
      chunk->init_weights(config.seed);
      setup.models.push_back(std::move(chunk));
      if (s == 0 && hold_stage0) {
        auto held = std::make_unique<HeldCompletions>();
        held_ = held.get();
        setup.completions = std::move(held);
      }
      workers_.push_back(std::make_shared<actors::StageWorker>(std::move(setup)));
      std::vector<std::unique_ptr<Optimizer>> optimizers;
      optimizers.push_back(std::make_unique<Optimizer>(workers_[s]->model(0), config.optimizer));
      optimizers_.push_back(
          std::make_shared<actors::StageOptimizer>(workers_[s], std::move(optimizers), std::vector<std::string>{""}));
    }
    activations_ = actors::make_channel(workers_[0]->context(), workers_[1]->context());
    gradients_ = actors::make_channel(workers_[1]->context(), workers_[0]->context());
    workers_[0]->connect(activations_.get(), nullptr, nullptr, gradients_.get());
    workers_[1]->connect(nullptr, activations_.get(), gradients_.get(), nullptr);

    actors::OptimizerSetup os;
    actors::TrainerSetup ts;
    for (int s = 0; s < kStages; ++s) {
      shards_.push_back(
          actors::spawn_optimizer_shard(*cs_->system, {optimizers_[s], s, false}, ActorThread::scheduled));
      actors::StageOptions o;
      o.max_outstanding = 2;  // runs ahead, as on a GPU
      o.optimizer_shard = shards_[s];
      ts.stages.push_back(actors::spawn_stage(*cs_->system, workers_[s], std::move(o), ActorThread::scheduled));
      os.shards.push_back(shards_[s]);
      os.ranks.push_back(s);
    }
    os.layout = ts.layout = RankLayout{.tensor = 1, .data = 1, .pipeline = kStages};
    os.clip_grad = config.optimizer.clip_grad;
    optimizer_ = actors::spawn_optimizer(*cs_->system, std::move(os), ActorThread::scheduled);
    actors::LoaderSetup ls{loader(tiny_data(model), kMicroBatchSize), nullptr, {}, 1};
    ls.feeds = {{ts.stages[0], 0, true, false}, {ts.stages[1], 0, false, true}};
    ts.loader = actors::spawn_loader(*cs_->system, std::move(ls), ActorThread::scheduled);
    ts.shards = shards_;
    ts.optimizer = optimizer_;
    ts.microbatches = kMicrobatches;
    ts.micro_batch_size = kMicroBatchSize;
    ts.seq_length = model.seq_length;
    ts.seed = config.seed;
    ts.lr = config.lr;
    ts.lr.warmup_iters = 0;  // the one iteration steps with a learning rate (a warmup's first has none)
    ts.epoch = std::chrono::steady_clock::now();
    for (const auto& a : ts.stages) actors_.push_back(caf::actor_cast<caf::actor>(a));
    actors_.push_back(caf::actor_cast<caf::actor>(ts.loader));
    trainer_ = actors::spawn_trainer(*cs_->system, std::move(ts), ActorThread::scheduled);
    for (const auto& a : shards_) actors_.push_back(caf::actor_cast<caf::actor>(a));
    actors_.push_back(caf::actor_cast<caf::actor>(optimizer_));
    actors_.push_back(caf::actor_cast<caf::actor>(trainer_));
    cs_->sched->run();
  }

  ~TwoStageRun() {
    for (const caf::actor& a : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    if (held_) held_->release_newest_first();
    cs_->sched->run();
    actors_.clear();
    shards_.clear();
    optimizer_ = nullptr;
    trainer_ = nullptr;
  }

  // Asks for one iteration; `step` runs between quiet points until the trainer has answered.
  template <typename Step>
  IterationStats train(Step step) {
    auto reply = (*cs_->self)->request(trainer_, caf::infinite, actors::train_atom::value);
    cs_->sched->run();
    for (int rounds = 0; (*cs_->self)->mailbox().empty(); ++rounds) {
      if (rounds > 1000 || !step()) {
        ADD_FAILURE() << "the iteration did not finish";
        return {};
      }
      cs_->sched->run();
    }
    IterationStats stats;
    reply.receive([&](IterationStats& s) { stats = s; },
                  [&](caf::error& e) { ADD_FAILURE() << cs_->system->render(e); });
    return stats;
  }

  std::vector<float> params(int stage) const {
    const Tensor& p = workers_[size_t(stage)]->model(0).params();
    return {p.data_as<float>(), p.data_as<float>() + p.numel()};
  }

  actors::StageWorker& worker(int stage) { return *workers_[size_t(stage)]; }
  HeldCompletions* held() { return held_; }

 private:
  std::unique_ptr<CoordinatedSystem> cs_;
  std::vector<std::shared_ptr<actors::StageWorker>> workers_;
  std::vector<std::shared_ptr<actors::StageOptimizer>> optimizers_;
  std::unique_ptr<actors::Channel> activations_, gradients_;
  HeldCompletions* held_ = nullptr;
  std::vector<actors::optimizer_shard_actor> shards_;
  actors::optimizer_actor optimizer_;
  actors::trainer_actor trainer_;
  std::vector<caf::actor> actors_;
};

TEST(StageOrder, AGradientArrivingBeforeItsForwardFinishedGivesTheSameStep) {
  TwoStageRun natural(false);
  const std::vector<float> initial = natural.params(0);
  const IterationStats expected = natural.train([] { return false; });
  ASSERT_GT(expected.tokens, 0);
  ASSERT_NE(natural.params(0), initial) << "the step changed the parameters";

  TwoStageRun forced(true);
  bool checked = false;
  const IterationStats got = forced.train([&] {
    if (!checked) {
      // Stage 0 enqueued the forwards of microbatches 0 and 1 (two in flight, neither
      // finished); stage 1 ran their forwards and backwards and sent the gradients back.
      EXPECT_EQ(forced.held()->held.size(), 2u);
      EXPECT_TRUE(forced.worker(0).ready(Op{OpKind::backward, 0, 0}))
          << "stage 0 holds microbatch 0's gradient while its forward still runs";
      EXPECT_TRUE(forced.worker(0).ready(Op{OpKind::backward, 1, 0}));
      checked = true;
    }
    return forced.held()->release_newest_first() > 0;
  });
  EXPECT_TRUE(checked);
  EXPECT_EQ(got.loss, expected.loss);
  EXPECT_EQ(got.grad_norm, expected.grad_norm);
  for (int s = 0; s < kStages; ++s) EXPECT_EQ(forced.params(s), natural.params(s)) << "stage " << s;
}

}  // namespace
}  // namespace troupe::test
