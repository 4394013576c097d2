// The trainer's protocol (trainer_actor in protocols.hpp), stepped on CAF's test coordinator
// with a scripted stage (the whole stage_actor interface, one device), the real data loader
// and a scripted optimizer: a train request has the loader send the stage its data, sends the
// stage its plan, asks the optimizer for the step once the stage has reported, and answers
// the iteration's stats from the report and the step; a stage's fail message answers the pending
// request with the stage's RunError (rendered: the stage's sentence) and every later request
// with RunError::rejected; an op silent past op_timeout answers RunError::timeout. The
// learning rate each step applies is Megatron's: its scheduler after the successful steps before
// the iteration (a skipped step does not advance it), and the stats' next_lr (what the log line
// prints) is the scheduler after the iteration's step.
#include <caf/all.hpp>

#include <chrono>
#include <cmath>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/train/loader_actor.hpp"
#include "actors/train/run_error.hpp"
#include "actors/train/trainer_actor.hpp"
#include "tests/actors/coordinated_system.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using actors::RunError;

// What the scripted stage does with a plan.
enum class Script { report, fail, silent };

struct StageLog {
  Script script = Script::report;
  actors::stage_listener trainer;
  std::vector<actors::IterationPlan> plans;
  std::vector<actors::StageData> data;
};

constexpr double kLossSum = 32.0;
constexpr double kGradNorm = 2.5;
const char* const kFault = "stage 0 failed in forward of microbatch 1 (chunk 0): injected fault";

actors::stage_actor::behavior_type scripted_stage_fn(actors::stage_actor::pointer self, StageLog* log) {
  return {
      [=](actors::peers_atom, actors::stage_listener& trainer, std::vector<actors::stage_peer_actor>&,
          std::vector<actors::stage_peer_actor>&) { log->trainer = trainer; },
      [=](actors::plan_atom, actors::IterationPlan& plan) {
        log->plans.push_back(plan);
        switch (log->script) {
          case Script::report: {
            actors::StageReport r{.stage = 0, .iteration = plan.iteration, .loss_sum = kLossSum};
            self->send(log->trainer, actors::report_atom::value, r);
            break;
          }
          case Script::fail:
            self->send(log->trainer, actors::fail_atom::value, actors::make_run_error(RunError::stage_failed, kFault));
            break;
          case Script::silent: {  // starts forward of microbatch 0 and never finishes it
            schedules::TraceEvent e;
            e.kind = schedules::EventKind::forward;
            e.microbatch = 0;
            e.chunk = 0;
            e.iteration = plan.iteration;
            e.start_ns = 1;
            self->send(log->trainer, actors::progress_atom::value, e);
            break;
          }
        }
      },
      [=](actors::data_atom, actors::StageData& d) { log->data.push_back(std::move(d)); },
      [](actors::parcel_atom, const actors::TensorMessage&) { ADD_FAILURE() << "parcel"; },
      [](actors::parcel_atom, const actors::RemoteParcel&) { ADD_FAILURE() << "remote parcel"; },
      [](actors::order_atom, int64_t, int, int, int) { ADD_FAILURE() << "order"; },
      [](actors::pump_atom) {},
      [](actors::done_atom, uint64_t, int64_t, int64_t, const std::vector<int64_t>&) {},
      [](actors::tied_atom) {},
      [](actors::stats_atom) {},
  };
}

// Answers every step with kGradNorm (skipped, as for inf/NaN gradients, at the iterations in
// `skips`), recording the requests.
actors::optimizer_actor::behavior_type scripted_optimizer_fn(actors::optimizer_actor::pointer,
                                                             std::vector<actors::StepRequest>* steps,
                                                             const std::set<int64_t>* skips) {
  return {
      [](actors::norm_atom, const actors::ShardReport&) { ADD_FAILURE() << "a shard report (no shard here)"; },
      [steps, skips](actors::step_atom, const actors::StepRequest& req) -> StepResult {
        steps->push_back(req);
        if (skips->count(req.iteration)) return {.skipped = true, .grad_norm = NAN};
        return {.skipped = false, .grad_norm = kGradNorm};
      },
  };
}

class TrainerProtocol : public ::testing::Test {
 protected:
  void start(Script script, std::chrono::milliseconds op_timeout = std::chrono::seconds(60),
             LrSchedule lr = {.lr = 1e-3, .warmup_iters = 2}) {
    cs_ = std::make_unique<CoordinatedSystem>(actors::add_run_error_category);
    log_.script = script;
    model_ = tiny_model(false);
    actors::TrainerSetup ts;
    ts.stages = {cs_->system->spawn(scripted_stage_fn, &log_)};
    ts.loader =
        actors::spawn_loader(*cs_->system, {loader(tiny_data(model_), 2), nullptr, {{ts.stages[0], 0, true, true}}, 1},
                             actors::ActorThread::scheduled);
    ts.optimizer = cs_->system->spawn(scripted_optimizer_fn, &steps_, &skips_);
    ts.microbatches = 2;
    ts.micro_batch_size = 2;
    ts.seq_length = model_.seq_length;
    ts.lr = lr;
    ts.op_timeout = op_timeout;
    ts.epoch = std::chrono::steady_clock::now();
    actors_ = {caf::actor_cast<caf::actor>(ts.stages[0]), caf::actor_cast<caf::actor>(ts.loader),
               caf::actor_cast<caf::actor>(ts.optimizer)};
    lr_ = ts.lr;
    trainer_ = actors::spawn_trainer(*cs_->system, std::move(ts), actors::ActorThread::scheduled);
    actors_.push_back(caf::actor_cast<caf::actor>(trainer_));
    cs_->sched->run();
    ASSERT_TRUE(log_.trainer) << "the trainer sent the stage its peers";
  }

  ~TrainerProtocol() override {
    if (!cs_) return;
    for (const caf::actor& a : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    cs_->sched->run();
    actors_.clear();
    trainer_ = nullptr;
    log_.trainer = nullptr;
  }

  // One train request, run until nothing is left to do (delayed messages wait); the stats, or
  // the error rendered.
  struct Answer {
    std::optional<IterationStats> stats;
    caf::error error;
    std::string text;
  };
  Answer train() {
    auto reply = (*cs_->self)->request(trainer_, caf::infinite, actors::train_atom::value);
    cs_->sched->run();
    return receive(reply);
  }
  template <typename Reply>
  Answer receive(Reply& reply) {
    Answer a;
    if ((*cs_->self)->mailbox().empty()) {  // receive() would wait for ever (the test clock stands still)
      ADD_FAILURE() << "the trainer did not answer";
      a.text = "no answer";
      return a;
    }
    reply.receive([&](IterationStats& s) { a.stats = s; },
                  [&](caf::error& e) {
                    a.error = e;
                    a.text = cs_->system->render(e);
                  });
    return a;
  }

  std::unique_ptr<CoordinatedSystem> cs_;
  GptConfig model_;
  LrSchedule lr_;
  StageLog log_;
  std::vector<actors::StepRequest> steps_;
  std::set<int64_t> skips_;  // iterations the optimizer skips
  actors::trainer_actor trainer_;
  std::vector<caf::actor> actors_;
};

TEST_F(TrainerProtocol, AReportAnswersTheIteration) {
  start(Script::report);
  for (int64_t it = 1; it <= 2; ++it) {  // the second from the batches prefetched during the first
    const Answer a = train();
    ASSERT_TRUE(a.stats) << a.text;
    const int64_t tokens = 2 * 2 * model_.seq_length;  // 2 microbatches of 2 rows, no ignored target
    EXPECT_EQ(a.stats->iteration, it);
    EXPECT_EQ(a.stats->tokens, tokens);
    EXPECT_DOUBLE_EQ(a.stats->loss, kLossSum / double(tokens));
    EXPECT_DOUBLE_EQ(a.stats->grad_norm, kGradNorm);
    EXPECT_DOUBLE_EQ(a.stats->lr, lr_.at(it - 1));  // after it - 1 successful steps
    ASSERT_EQ(log_.plans.size(), size_t(it));
    const actors::IterationPlan& plan = log_.plans.back();
    EXPECT_EQ(plan.iteration, it);
    EXPECT_EQ(plan.microbatches, 2);
    EXPECT_TRUE(plan.tokens.empty() && plan.targets.empty()) << "the data goes from the loader to the stage";
    // This iteration's data, and the next one's (asked for while this one runs).
    ASSERT_EQ(log_.data.size(), size_t(it + 1));
    const actors::StageData& data = log_.data[size_t(it - 1)];
    EXPECT_EQ(data.iteration, it);
    EXPECT_EQ(data.tokens.size(), 2u);   // the first stage's input
    EXPECT_EQ(data.targets.size(), 2u);  // the last stage's labels
    EXPECT_EQ(log_.data.back().iteration, it + 1);
    EXPECT_TRUE(plan.local_step);
    ASSERT_EQ(steps_.size(), size_t(it)) << "one step per iteration, asked once the stage reported";
    EXPECT_EQ(steps_.back().iteration, it);
    EXPECT_FLOAT_EQ(steps_.back().lr, float(lr_.at(it - 1)));
  }
}

// Megatron's OptimizerParamScheduler.get_lr (megatron/core/optimizer_param_scheduler.py) for a
// linear warmup then a cosine decay, at num_steps samples: written out here, apart from LrSchedule.
double megatron_warmup_cosine_lr(double num_steps, double max_lr, double min_lr, double warmup_steps,
                                 double decay_steps) {
  if (warmup_steps > 0 && num_steps <= warmup_steps) return max_lr * num_steps / warmup_steps;  // init lr 0
  if (num_steps > decay_steps) return min_lr;
  const double decay_ratio = (num_steps - warmup_steps) / (decay_steps - warmup_steps);
  return min_lr + 0.5 * (std::cos(M_PI * decay_ratio) + 1.0) * (max_lr - min_lr);
}

// Megatron's training loop (training.py): the scheduler starts at step(0); each iteration's
// optimizer step uses its lr, and only a successful step advances it, by the global batch in
// samples; the log line then prints the scheduler's lr. Warmup + cosine counted in samples with a
// warmup of a fraction of the decay (3.2 iterations: no whole number); iteration 4 is skipped.
TEST_F(TrainerProtocol, TheAppliedLearningRateIsMegatronsSchedulerBeforeTheStep) {
  constexpr int64_t kGbs = 4;  // 2 microbatches of 2 samples
  constexpr double kMax = 1e-3, kMin = 1e-4, kDecay = 8 * kGbs, kWarmup = 0.4 * kDecay;
  skips_ = {4};
  start(Script::report, std::chrono::seconds(60),
        {.lr = kMax,
         .min_lr = kMin,
         .warmup_iters = kWarmup,
         .decay_iters = int64_t(kDecay),
         .style = LrDecayStyle::cosine,
         .step_size = kGbs});
  double num_steps = 0;  // Megatron's scheduler, in samples
  for (int64_t it = 1; it <= 10; ++it) {
    const double applied = megatron_warmup_cosine_lr(num_steps, kMax, kMin, kWarmup, kDecay);
    if (!skips_.count(it)) num_steps += kGbs;
    const double logged = megatron_warmup_cosine_lr(num_steps, kMax, kMin, kWarmup, kDecay);
    const Answer a = train();
    ASSERT_TRUE(a.stats) << a.text;
    EXPECT_EQ(a.stats->skipped, skips_.count(it) == 1) << "iteration " << it;
    EXPECT_NEAR(a.stats->lr, applied, 1e-15) << "iteration " << it;
    EXPECT_FLOAT_EQ(steps_.back().lr, float(applied)) << "iteration " << it;
    EXPECT_NEAR(a.stats->next_lr, logged, 1e-15) << "iteration " << it;
  }
  EXPECT_EQ(steps_.front().lr, 0.0f) << "iteration 1 applies the warmup's initial lr";
  EXPECT_EQ(steps_[4].lr, steps_[3].lr) << "the skipped iteration 4 left the schedule where it was";
}

TEST_F(TrainerProtocol, AStageFailureAnswersWithTheStagesSentence) {
  start(Script::fail);
  Answer a = train();
  ASSERT_FALSE(a.stats);
  EXPECT_TRUE(actors::is_run_error(a.error, RunError::stage_failed)) << to_string(a.error);
  EXPECT_EQ(a.text, kFault);
  a = train();  // the run stays failed
  ASSERT_FALSE(a.stats);
  EXPECT_TRUE(actors::is_run_error(a.error, RunError::rejected)) << to_string(a.error);
  EXPECT_EQ(a.text, std::string("the run failed earlier: ") + kFault);
  EXPECT_EQ(log_.plans.size(), 1u);
}

TEST_F(TrainerProtocol, ASilentOpAnswersATimeout) {
  start(Script::silent, std::chrono::milliseconds(20));
  auto reply = (*cs_->self)->request(trainer_, caf::infinite, actors::train_atom::value);
  cs_->sched->run();  // the plan is out, the op started; the watchdog's tick waits (every 5 ms)
  ASSERT_EQ(log_.plans.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));  // the watchdog reads the real clock
  cs_->sched->advance_time(std::chrono::milliseconds(5));
  cs_->sched->run();
  const Answer a = receive(reply);
  ASSERT_FALSE(a.stats);
  EXPECT_TRUE(actors::is_run_error(a.error, RunError::timeout)) << to_string(a.error);
  EXPECT_EQ(a.text.rfind("stage 0 failed in forward of microbatch 0 (chunk 0): no answer after ", 0), 0u) << a.text;
  EXPECT_NE(a.text.find("(op timeout 20 ms)"), std::string::npos) << a.text;
}

}  // namespace
}  // namespace troupe::test
