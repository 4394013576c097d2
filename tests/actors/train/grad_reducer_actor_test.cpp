// The gradient reducer's protocol (grad_reducer_actor in protocols.hpp), stepped one message
// at a time on CAF's test coordinator: buckets handed over in any order start their
// collectives in bucket order (every data rank must issue the same sequence), the device's
// optimizer shard is told once the last one is under way, a new iteration starts afresh, and a bucket handed
// over twice ends the reducer with a RunError::reduction that renders as one sentence.
#include <caf/all.hpp>

#include <memory>
#include <optional>
#include <vector>

#include "actors/train/grad_reducer_actor.hpp"
#include "actors/train/run_error.hpp"
#include "tests/actors/coordinated_system.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using actors::BucketReady;
using actors::BucketsReduced;
using actors::GradBucket;

// A data-parallel group of two that records the collectives it is asked for, as (offset into
// the chunk's gradient buffer, elements), and reduces nothing.
class RecordingGroup final : public Collectives {
 public:
  explicit RecordingGroup(const Tensor& grads) : base_(grads.data_as<float>()) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_reduce(const Context&, const Tensor& t, ReduceOp) override {
    calls.push_back({t.data_as<float>() - base_, t.numel()});
  }
  void reduce_scatter(const Context&, const Tensor& in, const Tensor&) override {
    calls.push_back({in.data_as<float>() - base_, in.numel()});
  }
  void all_gather(const Context&, const Tensor&, const Tensor&) override { ADD_FAILURE() << "all_gather"; }
  void broadcast(const Context&, const Tensor&, int) override { ADD_FAILURE() << "broadcast"; }

  std::vector<std::pair<int64_t, int64_t>> calls;

 private:
  const float* base_;
};

// One CPU stage holding the whole tiny model, its gradient buffer cut into four buckets.
std::shared_ptr<actors::StageWorker> make_worker() {
  actors::StageSetup setup;
  setup.context = std::make_unique<Context>(Context::cpu());
  const GptConfig model = tiny_model(false);
  auto chunk = std::make_unique<GptChunk>(*setup.context, model, ChunkSpec::whole_model(), DType::f32);
  const int64_t n = chunk->params().numel();
  setup.buckets = actors::make_grad_buckets({n}, (n + 3) / 4, 1);
  setup.models.push_back(std::move(chunk));
  setup.dp_size = 2;
  setup.overlap_grad_reduce = true;
  return std::make_shared<actors::StageWorker>(std::move(setup));
}

// What the reducer's peers saw: the optimizer shard's messages, and whether (and why) the
// reducer went down (seen by a watcher, as the trainer monitors it).
struct ReducerLog {
  std::vector<BucketsReduced> reduced;
  std::optional<caf::error> down;
};

actors::reduced_listener::behavior_type fake_shard_fn(actors::reduced_listener::pointer, ReducerLog* log) {
  return {[log](actors::reduced_atom, const BucketsReduced& r) { log->reduced.push_back(r); }};
}

caf::behavior watcher_fn(caf::event_based_actor* self, ReducerLog* log, actors::grad_reducer_actor reducer) {
  self->monitor(reducer);
  self->set_down_handler([log](caf::down_msg& dm) { log->down = dm.reason; });
  return {[](int) {}};
}

class GradReducerProtocol : public ::testing::Test {
 protected:
  GradReducerProtocol() {
    cs_ = std::make_unique<CoordinatedSystem>(actors::add_run_error_category);
    worker_ = make_worker();
    comm_ = std::make_unique<Context>(Context::cpu());
    group_ = std::make_unique<RecordingGroup>(worker_->model(0).grads());
    shard_ = cs_->system->spawn(fake_shard_fn, &log_);
    reducer_ = actors::spawn_grad_reducer(*cs_->system, {worker_, comm_.get(), group_.get(), shard_},
                                          actors::ActorThread::scheduled);
    stage_ = cs_->system->spawn(watcher_fn, &log_, reducer_);  // stands in for the stage (the sender)
    cs_->sched->run();                                         // all initialized
  }

  ~GradReducerProtocol() override {
    caf::anon_send_exit(stage_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(shard_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(reducer_, caf::exit_reason::user_shutdown);
    cs_->sched->run();
    stage_ = nullptr;
    shard_ = nullptr;
    reducer_ = nullptr;
  }

  // The stage hands over one bucket; the reducer handles exactly that message.
  void hand_over(int64_t iteration, int bucket) {
    caf::send_as(stage_, reducer_, actors::bucket_atom::value, BucketReady{iteration, bucket, nullptr});
    ASSERT_TRUE(cs_->sched->try_run_once());
  }

  // The collectives issued so far, as bucket indices.
  std::vector<int> started() const {
    const std::vector<GradBucket>& buckets = worker_->buckets();
    std::vector<int> out;
    for (const auto& [offset, n] : group_->calls) {
      int found = -1;
      for (size_t b = 0; b < buckets.size(); ++b)
        if (buckets[b].begin == offset && buckets[b].end - buckets[b].begin == n) found = int(b);
      out.push_back(found);
    }
    return out;
  }

  std::unique_ptr<CoordinatedSystem> cs_;
  std::shared_ptr<actors::StageWorker> worker_;
  std::unique_ptr<Context> comm_;
  std::unique_ptr<RecordingGroup> group_;
  ReducerLog log_;
  actors::reduced_listener shard_;
  actors::grad_reducer_actor reducer_;
  caf::actor stage_;
};

TEST_F(GradReducerProtocol, OutOfOrderBucketsStartInBucketOrder) {
  ASSERT_EQ(worker_->buckets().size(), 4u) << "the test wants four buckets";
  hand_over(1, 2);
  EXPECT_EQ(started(), std::vector<int>{}) << "bucket 2 must wait for buckets 0 and 1";
  hand_over(1, 0);
  EXPECT_EQ(started(), std::vector<int>({0}));
  hand_over(1, 3);
  EXPECT_EQ(started(), std::vector<int>({0}));
  EXPECT_TRUE(log_.reduced.empty()) << "answered before every bucket was under way";
  hand_over(1, 1);
  EXPECT_EQ(started(), std::vector<int>({0, 1, 2, 3}));
  cs_->sched->run();  // the message reaches the shard
  ASSERT_EQ(log_.reduced.size(), 1u);
  EXPECT_EQ(log_.reduced[0].iteration, 1);

  // The next iteration starts afresh, whatever order its buckets come in.
  group_->calls.clear();
  for (int b : {3, 1, 0, 2}) hand_over(2, b);
  EXPECT_EQ(started(), std::vector<int>({0, 1, 2, 3}));
  cs_->sched->run();
  ASSERT_EQ(log_.reduced.size(), 2u);
  EXPECT_EQ(log_.reduced[1].iteration, 2);
  EXPECT_FALSE(log_.down.has_value());
}

TEST_F(GradReducerProtocol, BucketHandedOverTwiceEndsTheReducerWithItsSentence) {
  hand_over(1, 1);
  hand_over(1, 1);
  cs_->sched->run();  // the down message reaches the watcher
  ASSERT_TRUE(log_.down.has_value());
  EXPECT_TRUE(actors::is_run_error(*log_.down, actors::RunError::reduction)) << cs_->system->render(*log_.down);
  const std::string text = cs_->system->render(*log_.down);
  EXPECT_EQ(text.rfind("gradient reducer: bucket 1 of 4 handed over twice or unknown", 0), 0u) << text;
  EXPECT_TRUE(log_.reduced.empty());
}

}  // namespace
}  // namespace troupe::test
