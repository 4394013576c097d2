// The inference worker's protocol (inference_worker_actor in actors/serve/protocols.hpp) on the
// tiny CPU model of the pool tests, stepped on CAF's test coordinator with a stand-in router: a
// request runs to its last token (the engine's tokens) and the router hears it end; a request
// the engine refuses answers its caller with ServeError::rejected; a tensor-parallel replica
// whose step fails answers its request with ServeError::worker_failed, tells the router it
// retired before that, and answers a later request with ServeError::out_of_service.
#include <caf/all.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/fabric/collective_groups.hpp"
#include "actors/serve/inference_worker.hpp"
#include "actors/serve/serve_error.hpp"
#include "tests/actors/coordinated_system.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/serve_test_model.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using actors::Submission;

// What the router heard, in order: "finished" or "retired: <sentence>".
struct WorkerLog {
  std::vector<std::string> router;
};

actors::worker_listener::behavior_type fake_router_fn(actors::worker_listener::pointer self, WorkerLog* log) {
  return {
      [log](actors::finished_atom, int worker) { log->router.push_back(str_cat("finished ", worker)); },
      [self, log](actors::retired_atom, int worker, const caf::error& why) {
        log->router.push_back(str_cat("retired ", worker, ": ", self->system().render(why)));
      },
  };
}

// One request's outcome, as its callbacks saw it.
struct Outcome {
  std::vector<int32_t> tokens;
  bool finished = false;
  std::optional<caf::error> error;
};

class WorkerProtocol : public ::testing::Test {
 protected:
  WorkerProtocol() {
    cs_ = std::make_unique<CoordinatedSystem>(actors::add_serve_error_category);
    router_ = cs_->system->spawn(fake_router_fn, &log_);
    cs_->sched->run();
  }

  ~WorkerProtocol() override {
    caf::anon_send_exit(worker_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
    cs_->sched->run();
    worker_ = nullptr;
    router_ = nullptr;
  }

  void spawn(actors::InferenceReplica replica) {
    worker_ = actors::spawn_inference_worker(*cs_->system, std::move(replica), 0, router_, &free_blocks_,
                                             actors::ActorThread::scheduled);
    cs_->sched->run();
  }

  // The router's submission of `req`; its callbacks fill `out`.
  void submit(const GenerationRequest& req, Outcome* out) {
    auto r = std::make_shared<actors::PoolRequest>();
    r->request = req;
    r->on_token = [out](const TokenEvent& e) {
      if (e.has_token) out->tokens.push_back(e.token);
      out->finished = e.finish != FinishReason::none;
    };
    r->on_error = [out](const caf::error& e) { out->error = e; };
    r->cancel = std::make_shared<std::atomic<bool>>(false);
    caf::anon_send(worker_, actors::submit_atom::value, Submission{std::move(r)});
  }

  static GenerationRequest greedy(int tokens) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = tokens;
    return {random_token_list(5, 1, 50257), p};
  }

  ServeTestModel m;
  std::unique_ptr<CoordinatedSystem> cs_;
  WorkerLog log_;
  std::atomic<int64_t> free_blocks_{0};
  actors::worker_listener router_;
  actors::inference_worker_actor worker_;
};

TEST_F(WorkerProtocol, ARequestRunsToItsLastTokenAndTheRouterHearsItEnd) {
  spawn(std::move(m.replicas(1)[0]));
  const int64_t all_free = free_blocks_;
  const GenerationRequest req = greedy(4);
  Outcome out;
  submit(req, &out);
  cs_->sched->run();  // the submission, then one step after another until the request ends
  EXPECT_TRUE(out.finished);
  EXPECT_FALSE(out.error.has_value());
  EXPECT_EQ(out.tokens, m.alone(req));
  EXPECT_EQ(log_.router, std::vector<std::string>{"finished 0"});
  EXPECT_EQ(free_blocks_, all_free) << "the request's KV blocks were not freed";
}

TEST_F(WorkerProtocol, ARefusedRequestAnswersItsCallerWithTheServeError) {
  spawn(std::move(m.replicas(1)[0]));
  Outcome refused;
  submit({{}, {}}, &refused);  // an empty prompt
  cs_->sched->run();
  ASSERT_TRUE(refused.error.has_value());
  EXPECT_TRUE(actors::is_serve_error(*refused.error, actors::ServeError::rejected))
      << cs_->system->render(*refused.error);
  EXPECT_NE(cs_->system->render(*refused.error).find("the prompt is empty"), std::string::npos)
      << cs_->system->render(*refused.error);
  EXPECT_FALSE(refused.finished);
  EXPECT_EQ(log_.router, std::vector<std::string>{"finished 0"});

  Outcome served;  // the worker still serves
  submit(greedy(2), &served);
  cs_->sched->run();
  EXPECT_TRUE(served.finished);
  EXPECT_EQ(served.tokens.size(), 2u);
}

TEST_F(WorkerProtocol, AFailedTensorParallelStepRetiresTheWorker) {
  auto group = actors::make_cpu_group(2, {"tp", std::chrono::seconds(30)});
  spawn(m.tensor_parallel_replica(group));
  Outcome failed;
  submit(greedy(4), &failed);
  ASSERT_TRUE(cs_->sched->try_run_once());  // the submission: the request joins the engine, a step is due
  for (auto& member : group) member->abort();
  cs_->sched->run();  // the step fails
  ASSERT_TRUE(failed.error.has_value());
  const std::string text = cs_->system->render(*failed.error);
  EXPECT_TRUE(actors::is_serve_error(*failed.error, actors::ServeError::worker_failed)) << text;
  EXPECT_EQ(text.rfind("inference worker 0: ", 0), 0u) << text;
  ASSERT_EQ(log_.router.size(), 2u);
  EXPECT_EQ(log_.router[0], str_cat("retired 0: ", text, " (this tensor-parallel replica is out of service)"))
      << "the router must hear of the retirement before the request's end";
  EXPECT_EQ(log_.router[1], "finished 0");
  EXPECT_EQ(free_blocks_, 0);

  Outcome late;  // routed here before the router heard of the retirement
  submit(greedy(4), &late);
  cs_->sched->run();
  ASSERT_TRUE(late.error.has_value());
  EXPECT_TRUE(actors::is_serve_error(*late.error, actors::ServeError::out_of_service));
  EXPECT_EQ(cs_->system->render(*late.error), str_cat(text, " (this tensor-parallel replica is out of service)"));
  EXPECT_EQ(log_.router.back(), "finished 0");
}

}  // namespace
}  // namespace troupe::test
