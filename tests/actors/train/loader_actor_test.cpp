// The data loader's protocol (loader_actor in protocols.hpp), stepped one message at a time on
// CAF's test coordinator, feeding two data ranks of a two-stage pipeline (four stand-in
// stages): a training request sends the first stages the inputs and the last stages the
// labels, data rank d microbatches d, d + 2, ..., answers the counts and reads the next batch
// ahead in the same step; the next request is served from that read-ahead (in sample order);
// a validation request goes to data rank 0 only and leaves the read-ahead alone; running out
// of data answers a RunError::data that renders as the user's sentence, and sends nothing.
#include <caf/all.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/train/loader_actor.hpp"
#include "actors/train/run_error.hpp"
#include "tests/actors/coordinated_system.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using actors::BatchInfo;
using actors::StageData;

// A stand-in stage: keeps what the loader sent it.
actors::data_listener::behavior_type recording_stage_fn(actors::data_listener::pointer, std::vector<StageData>* got) {
  return {[got](actors::data_atom, StageData& d) { got->push_back(std::move(d)); }};
}

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
    cs_ = std::make_unique<CoordinatedSystem>(actors::add_run_error_category);
    const GptConfig model = tiny_model(false);
    train_data_ = tiny_data(model, train_samples, 7);
    valid_data_ = tiny_data(model, 64, 8);
    train_ = std::make_shared<CountingSource>(train_data_);
    valid_ = std::make_shared<CountingSource>(valid_data_);
    actors::LoaderSetup setup{loader(train_, kMicroBatch), loader(valid_, kMicroBatch), {}, 2};
    for (int dp = 0; dp < 2; ++dp)
      for (int pp = 0; pp < 2; ++pp) {
        stages_.push_back(cs_->system->spawn(recording_stage_fn, &got_[dp][pp]));
        setup.feeds.push_back({stages_.back(), dp, pp == 0, pp == 1});
      }
    loader_ = actors::spawn_loader(*cs_->system, std::move(setup), actors::ActorThread::scheduled);
    cs_->sched->run();
  }

  ~LoaderProtocol() override {
    if (!cs_) return;
    caf::anon_send_exit(loader_, caf::exit_reason::user_shutdown);
    for (const auto& s : stages_) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    cs_->sched->run();
    loader_ = nullptr;
    stages_.clear();
  }

  // One request for plan `iteration`, handled by exactly one step of the loader; its answer
  // or its error. The stand-in stages then get what it sent them.
  struct Answer {
    std::optional<BatchInfo> info;
    caf::error error;
  };
  Answer ask(int64_t iteration, bool train, int64_t count) {
    for (auto& rank : got_)
      for (auto& stage : rank) stage.clear();
    Answer a;
    auto reply = (*cs_->self)->request(loader_, caf::infinite, actors::batch_atom::value, iteration, train, count);
    EXPECT_TRUE(cs_->sched->try_run_once());
    if ((*cs_->self)->mailbox().empty()) {  // receive() would wait for ever
      ADD_FAILURE() << "the loader did not answer";
      return a;
    }
    reply.receive([&](BatchInfo& i) { a.info = i; }, [&](caf::error& e) { a.error = std::move(e); });
    cs_->sched->run();  // the stages take their data
    return a;
  }

  // The first token of every row of the tensors (inputs, or labels: the next token).
  static std::vector<int32_t> first_tokens(const std::vector<Tensor>& tensors) {
    std::vector<int32_t> out;
    for (const Tensor& t : tensors)
      for (int64_t row = 0; row < t.shape()[0]; ++row) out.push_back(t.data_as<int32_t>()[row * t.shape()[1]]);
    return out;
  }
  // The samples' first (or, `offset` 1, second) tokens of microbatches `mbs` (kMicroBatch rows each).
  std::vector<int32_t> samples(const SampleSource& data, int64_t first_sample, std::vector<int64_t> mbs,
                               int offset = 0) const {
    std::vector<int32_t> out;
    for (int64_t mb : mbs) {
      const std::vector<int32_t> part = samples(data, first_sample + mb * kMicroBatch, kMicroBatch, offset);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  std::vector<int32_t> samples(const SampleSource& data, int64_t first, int64_t n, int offset = 0) const {
    std::vector<int32_t> out, text(size_t(data.sequence_length() + 1));
    for (int64_t i = first; i < first + n; ++i) {
      data.sample(i, text.data());
      out.push_back(text[size_t(offset)]);
    }
    return out;
  }

  std::unique_ptr<CoordinatedSystem> cs_;
  std::shared_ptr<const SampleSource> train_data_, valid_data_;
  std::shared_ptr<CountingSource> train_, valid_;
  actors::loader_actor loader_;
  std::vector<actors::data_listener> stages_;
  std::vector<StageData> got_[2][2];  // [data rank][pipeline stage]
};

TEST_F(LoaderProtocol, EachStageGetsItsShareAndTheNextBatchIsReadAhead) {
  start(/*train_samples=*/64);
  Answer a = ask(1, true, 4);  // samples 0..7: microbatches 0..3 of 2 rows
  ASSERT_TRUE(a.info) << cs_->system->render(a.error);
  EXPECT_EQ(a.info->microbatches, 4);
  EXPECT_EQ(a.info->target_tokens, 4 * kMicroBatch * train_data_->sequence_length()) << "no target is masked here";
  EXPECT_EQ(train_->reads, 16) << "the answer's 8 samples and the next request's 8, read ahead";
  for (int dp = 0; dp < 2; ++dp) {
    ASSERT_EQ(got_[dp][0].size(), 1u);
    ASSERT_EQ(got_[dp][1].size(), 1u);
    const StageData& first = got_[dp][0][0];
    const StageData& last = got_[dp][1][0];
    EXPECT_EQ(first.iteration, 1);
    EXPECT_EQ(last.iteration, 1);
    EXPECT_TRUE(first.targets.empty()) << "the first stage takes no labels";
    EXPECT_TRUE(last.tokens.empty()) << "the last stage takes no inputs";
    const std::vector<int64_t> mine = {dp, dp + 2};  // data rank d: microbatches d, d + D
    EXPECT_EQ(first_tokens(first.tokens), samples(*train_data_, 0, mine)) << "data rank " << dp;
    EXPECT_EQ(first_tokens(last.targets), samples(*train_data_, 0, mine, 1)) << "data rank " << dp;
  }

  a = ask(-1, false, 2);  // validation: data rank 0 takes all; the read-ahead stays
  ASSERT_TRUE(a.info) << cs_->system->render(a.error);
  EXPECT_EQ(a.info->microbatches, 2);
  ASSERT_EQ(got_[0][0].size(), 1u);
  EXPECT_EQ(got_[0][0][0].iteration, -1);
  EXPECT_EQ(first_tokens(got_[0][0][0].tokens), samples(*valid_data_, 0, {0, 1}));
  EXPECT_TRUE(got_[1][0].empty() && got_[1][1].empty()) << "evaluation runs on data rank 0 only";
  EXPECT_EQ(train_->reads, 16);

  a = ask(2, true, 4);  // samples 8..15, from the read-ahead; 16..23 read ahead
  ASSERT_TRUE(a.info) << cs_->system->render(a.error);
  ASSERT_EQ(got_[1][0].size(), 1u);
  EXPECT_EQ(got_[1][0][0].iteration, 2);
  EXPECT_EQ(first_tokens(got_[1][0][0].tokens), samples(*train_data_, 8, {1, 3}));
  EXPECT_EQ(train_->reads, 24) << "the answer came from the read-ahead, the next 8 were read ahead";
}

TEST_F(LoaderProtocol, RunningOutAnswersADataErrorWithTheUsersSentence) {
  start(/*train_samples=*/12);
  ASSERT_TRUE(ask(1, true, 2).info);  // 0..3, read ahead 4..7
  ASSERT_TRUE(ask(2, true, 2).info);  // 4..7, read ahead 8..11
  Answer a = ask(3, true, 2);         // 8..11; the read-ahead runs out silently
  ASSERT_TRUE(a.info) << cs_->system->render(a.error);
  EXPECT_EQ(first_tokens(got_[0][0][0].tokens), samples(*train_data_, 8, 2));
  a = ask(4, true, 2);
  ASSERT_FALSE(a.info);
  EXPECT_TRUE(actors::is_run_error(a.error, actors::RunError::data)) << to_string(a.error);
  const std::string text = cs_->system->render(a.error);
  EXPECT_EQ(text.rfind("data loader: the training data ran out after 12 samples (12 in the dataset)", 0), 0u) << text;
  for (int dp = 0; dp < 2; ++dp)
    for (int pp = 0; pp < 2; ++pp) EXPECT_TRUE(got_[dp][pp].empty()) << "a failed batch sends nothing";

  a = ask(-1, false, 100);  // more validation batches than there are
  EXPECT_TRUE(actors::is_run_error(a.error, actors::RunError::data)) << to_string(a.error);
  EXPECT_NE(cs_->system->render(a.error).find("the validation data ran out"), std::string::npos)
      << cs_->system->render(a.error);
}

}  // namespace
}  // namespace troupe::test
