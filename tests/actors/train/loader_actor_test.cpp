// The data loader's protocol (loader_actor in protocols.hpp), stepped one message at a time on
// CAF's test coordinator: a training request is answered and the next one of the same count
// prefetched in the same step, the next request is answered from that prefetch (in sample
// order), a validation request leaves it alone, and running out of data answers a
// RunError::data that renders as the user's sentence.
#include <caf/all.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/train/loader_actor.hpp"
#include "actors/train/run_error.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using actors::BatchList;

// Counts the samples read from it (on the test coordinator everything runs on this thread).
class CountingSource final : public SampleSource {
 public:
  explicit CountingSource(std::shared_ptr<const SampleSource> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t sequence_length() const override { return inner_->sequence_length(); }
  void sample(int64_t index, int32_t* out) const override {
    ++reads;
    inner_->sample(index, out);
  }
  mutable int64_t reads = 0;

 private:
  std::shared_ptr<const SampleSource> inner_;
};

constexpr int64_t kMicroBatch = 2;

class LoaderProtocol : public ::testing::Test {
 protected:
  void start(int64_t train_samples) {
    cfg_.set("scheduler.policy", caf::atom("testing"));
    actors::add_run_error_category(cfg_);
    system_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(system_->scheduler());
    self_ = std::make_unique<caf::scoped_actor>(*system_);
    const GptConfig model = tiny_model(false);
    train_data_ = tiny_data(model, train_samples, 7);
    valid_data_ = tiny_data(model, 64, 8);
    train_ = std::make_shared<CountingSource>(train_data_);
    valid_ = std::make_shared<CountingSource>(valid_data_);
    loader_ = actors::spawn_loader(*system_, loader(train_, kMicroBatch), loader(valid_, kMicroBatch),
                                   actors::SpawnMode::scheduled);
    sched_->run();
  }

  ~LoaderProtocol() override {
    if (!system_) return;
    caf::anon_send_exit(loader_, caf::exit_reason::user_shutdown);
    sched_->run();
    loader_ = nullptr;
    self_.reset();
  }

  // One request, handled by exactly one step of the loader; its answer or its error.
  struct Answer {
    std::optional<BatchList> batches;
    caf::error error;
  };
  Answer ask(bool train, int64_t count) {
    Answer a;
    auto reply = (*self_)->request(loader_, caf::infinite, actors::batch_atom::value, train, count);
    EXPECT_TRUE(sched_->try_run_once());
    EXPECT_FALSE(sched_->has_job()) << "the loader answers within the request's step";
    if ((*self_)->mailbox().empty()) {  // receive() would wait for ever
      ADD_FAILURE() << "the loader did not answer";
      return a;
    }
    reply.receive([&](BatchList& b) { a.batches = std::move(b); }, [&](caf::error& e) { a.error = std::move(e); });
    return a;
  }

  // The first token of every row of the batches, to compare with the data's samples.
  static std::vector<int32_t> first_tokens(const BatchList& batches) {
    std::vector<int32_t> out;
    for (const Batch& b : batches)
      for (int64_t row = 0; row < b.tokens.shape()[0]; ++row)
        out.push_back(b.tokens.data_as<int32_t>()[row * b.tokens.shape()[1]]);
    return out;
  }
  std::vector<int32_t> samples(const SampleSource& data, int64_t first, int64_t n) const {
    std::vector<int32_t> out, text(size_t(data.sequence_length() + 1));
    for (int64_t i = first; i < first + n; ++i) {
      data.sample(i, text.data());
      out.push_back(text[0]);
    }
    return out;
  }

  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> system_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::unique_ptr<caf::scoped_actor> self_;
  std::shared_ptr<const SampleSource> train_data_, valid_data_;
  std::shared_ptr<CountingSource> train_, valid_;
  actors::loader_actor loader_;
};

TEST_F(LoaderProtocol, PrefetchAnswersTheNextRequest) {
  start(/*train_samples=*/64);
  Answer a = ask(true, 2);  // samples 0..3
  ASSERT_TRUE(a.batches) << system_->render(a.error);
  EXPECT_EQ(first_tokens(*a.batches), samples(*train_data_, 0, 4));
  EXPECT_EQ(train_->reads, 8) << "the answer's 4 samples and the next request's 4, prefetched";

  a = ask(false, 1);  // validation: the training prefetch stays
  ASSERT_TRUE(a.batches) << system_->render(a.error);
  EXPECT_EQ(first_tokens(*a.batches), samples(*valid_data_, 0, 2));
  EXPECT_EQ(train_->reads, 8);

  a = ask(true, 2);  // samples 4..7, from the prefetch; 8..11 prefetched
  ASSERT_TRUE(a.batches) << system_->render(a.error);
  EXPECT_EQ(first_tokens(*a.batches), samples(*train_data_, 4, 4));
  EXPECT_EQ(train_->reads, 12) << "the answer came from the prefetch, the next 4 were prefetched";
}

TEST_F(LoaderProtocol, RunningOutAnswersADataErrorWithTheUsersSentence) {
  start(/*train_samples=*/12);
  ASSERT_TRUE(ask(true, 2).batches);  // 0..3, prefetched 4..7
  ASSERT_TRUE(ask(true, 2).batches);  // 4..7, prefetched 8..11
  Answer a = ask(true, 2);            // 8..11; the prefetch runs out silently
  ASSERT_TRUE(a.batches) << system_->render(a.error);
  EXPECT_EQ(first_tokens(*a.batches), samples(*train_data_, 8, 4));
  a = ask(true, 2);
  ASSERT_FALSE(a.batches);
  EXPECT_TRUE(actors::is_run_error(a.error, actors::RunError::data)) << to_string(a.error);
  const std::string text = system_->render(a.error);
  EXPECT_EQ(text.rfind("data loader: the training data ran out after 12 samples (12 in the dataset)", 0), 0u) << text;

  a = ask(false, 100);  // more validation batches than there are
  EXPECT_TRUE(actors::is_run_error(a.error, actors::RunError::data)) << to_string(a.error);
  EXPECT_NE(system_->render(a.error).find("the validation data ran out"), std::string::npos)
      << system_->render(a.error);
}

}  // namespace
}  // namespace troupe::test
