// The trainer's protocol (trainer_actor in protocols.hpp), stepped on CAF's test coordinator
// with a scripted stage (the whole stage_actor interface, one device) and the real data
// loader: a train request gets the batches, sends the stage its plan and answers the
// iteration's stats from the stage's report; a stage's fail message answers the pending
// request with the stage's RunError (rendered: the stage's sentence) and every later request
// with RunError::rejected; an op silent past op_timeout answers RunError::timeout.
#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/train/loader_actor.hpp"
#include "actors/train/run_error.hpp"
#include "actors/train/trainer_actor.hpp"
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
            r.stepped = plan.local_step;
            r.step = StepResult{.skipped = false, .grad_norm = kGradNorm};
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
      [](actors::parcel_atom, const actors::TensorMessage&) { ADD_FAILURE() << "parcel"; },
      [](actors::parcel_atom, const actors::RemoteParcel&) { ADD_FAILURE() << "remote parcel"; },
      [](actors::order_atom, int64_t, int, int, int) { ADD_FAILURE() << "order"; },
      [](actors::apply_atom, const actors::StepRequest&, float, bool) -> bool {
        ADD_FAILURE() << "apply (a single stage takes its step itself)";
        return false;
      },
      [](actors::reduced_atom, const actors::BucketsReduced&) { ADD_FAILURE() << "reduced"; },
      [](actors::pump_atom) {},
      [](actors::done_atom, uint64_t, int64_t, int64_t) {},
      [](actors::tied_atom) {},
      [](actors::stats_atom) {},
  };
}

actors::optimizer_actor::behavior_type unused_optimizer_fn() {
  return {[](actors::step_atom, const actors::StepRequest&) -> StepResult {
    ADD_FAILURE() << "step (a single stage takes its step itself)";
    return {};
  }};
}

class TrainerProtocol : public ::testing::Test {
 protected:
  void start(Script script, std::chrono::milliseconds op_timeout = std::chrono::seconds(60)) {
    cfg_.set("scheduler.policy", caf::atom("testing"));
    actors::add_run_error_category(cfg_);
    system_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(system_->scheduler());
    self_ = std::make_unique<caf::scoped_actor>(*system_);
    log_.script = script;
    model_ = tiny_model(false);
    actors::TrainerSetup ts;
    ts.stages = {system_->spawn(scripted_stage_fn, &log_)};
    ts.loader = actors::spawn_loader(*system_, loader(tiny_data(model_), 2), nullptr, actors::SpawnMode::scheduled);
    ts.optimizer = system_->spawn(unused_optimizer_fn);
    ts.microbatches = 2;
    ts.micro_batch_size = 2;
    ts.seq_length = model_.seq_length;
    ts.lr = {.lr = 1e-3, .warmup_iters = 2};
    ts.op_timeout = op_timeout;
    ts.epoch = std::chrono::steady_clock::now();
    actors_ = {caf::actor_cast<caf::actor>(ts.stages[0]), caf::actor_cast<caf::actor>(ts.loader),
               caf::actor_cast<caf::actor>(ts.optimizer)};
    lr_ = ts.lr;
    trainer_ = actors::spawn_trainer(*system_, std::move(ts), actors::SpawnMode::scheduled);
    actors_.push_back(caf::actor_cast<caf::actor>(trainer_));
    sched_->run();
    ASSERT_TRUE(log_.trainer) << "the trainer sent the stage its peers";
  }

  ~TrainerProtocol() override {
    if (!system_) return;
    for (const caf::actor& a : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched_->run();
    actors_.clear();
    trainer_ = nullptr;
    log_.trainer = nullptr;
    self_.reset();
  }

  // One train request, run until nothing is left to do (delayed messages wait); the stats, or
  // the error rendered.
  struct Answer {
    std::optional<IterationStats> stats;
    caf::error error;
    std::string text;
  };
  Answer train() {
    auto reply = (*self_)->request(trainer_, caf::infinite, actors::train_atom::value);
    sched_->run();
    return receive(reply);
  }
  template <typename Reply>
  Answer receive(Reply& reply) {
    Answer a;
    if ((*self_)->mailbox().empty()) {  // receive() would wait for ever (the test clock stands still)
      ADD_FAILURE() << "the trainer did not answer";
      a.text = "no answer";
      return a;
    }
    reply.receive([&](IterationStats& s) { a.stats = s; },
                  [&](caf::error& e) {
                    a.error = e;
                    a.text = system_->render(e);
                  });
    return a;
  }

  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> system_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::unique_ptr<caf::scoped_actor> self_;
  GptConfig model_;
  LrSchedule lr_;
  StageLog log_;
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
    EXPECT_DOUBLE_EQ(a.stats->lr, lr_.at(it));
    ASSERT_EQ(log_.plans.size(), size_t(it));
    const actors::IterationPlan& plan = log_.plans.back();
    EXPECT_EQ(plan.iteration, it);
    EXPECT_EQ(plan.microbatches, 2);
    EXPECT_EQ(plan.tokens.size(), 2u);   // the first stage's input
    EXPECT_EQ(plan.targets.size(), 2u);  // the last stage's labels
    EXPECT_TRUE(plan.local_step);
  }
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
  auto reply = (*self_)->request(trainer_, caf::infinite, actors::train_atom::value);
  sched_->run();  // the plan is out, the op started; the watchdog's tick waits (every 5 ms)
  ASSERT_EQ(log_.plans.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));  // the watchdog reads the real clock
  sched_->advance_time(std::chrono::milliseconds(5));
  sched_->run();
  const Answer a = receive(reply);
  ASSERT_FALSE(a.stats);
  EXPECT_TRUE(actors::is_run_error(a.error, RunError::timeout)) << to_string(a.error);
  EXPECT_EQ(a.text.rfind("stage 0 failed in forward of microbatch 0 (chunk 0): no answer after ", 0), 0u) << a.text;
  EXPECT_NE(a.text.find("(op timeout 20 ms)"), std::string::npos) << a.text;
}

}  // namespace
}  // namespace troupe::test
