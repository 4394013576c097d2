// --pipeline-schedule zb-h1 and zb-v from the `troupe` command line: on real text (Moby-Dick
// through `troupe preprocess`, GPT-2's tokenizer, dropout on) PP2 logs the losses of one device
// (within 1e-5 relative) and writes a --trace of B and W ops that `troupe replay` reads and
// reports a bubble for (and predicts the other schedule from); interleaving and the features the
// split backward or the V does not support stop before training naming the flags.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class ZeroBubbleCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("zero_bubble_cli");
    preprocess_moby_dick(dir_->path().string(), 8);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // gpt2-tiny (4 layers, dropout 0.1) on the preprocessed text, 4 iterations of 2 microbatches.
  static TroupeExit train(const Args& extra, const std::string& tag) {
    return run_to_exit(moby_dick_train_args(dir_->path().string(), "gpt2-tiny", 4, "1e-3", extra), tag, 300s);
  }

  static TempDir* dir_;
};

TempDir* ZeroBubbleCli::dir_ = nullptr;

// Both runs ended well, `run`'s header names `schedule`, and it logged one device's 4 losses (1e-5 relative).
void expect_same_losses(const TroupeExit& one, const TroupeExit& run, const std::string& schedule) {
  ASSERT_EQ(one.code, std::optional<int>(0)) << one.output;
  ASSERT_EQ(run.code, std::optional<int>(0)) << run.output;
  EXPECT_TRUE(contains(run.output, schedule)) << run.output;
  const std::map<int64_t, std::string> want = logged_losses(one.output), got = logged_losses(run.output);
  ASSERT_EQ(want.size(), 4u) << one.output;
  ASSERT_EQ(got.size(), want.size()) << run.output;
  for (const auto& [it, loss] : want) {
    const double x = std::stod(got.at(it)), y = std::stod(loss);
    EXPECT_LT(std::abs(x - y) / std::abs(y), 1e-5) << "iteration " << it << ": " << x << " vs " << y;
  }
}

TEST_F(ZeroBubbleCli, TrainsLikeOneDeviceAndReplaysItsTrace) {
  const std::string trace = (dir_->path() / "zb.trace").string();
  const TroupeExit one = train({"--devices", "1"}, "zb_one");
  const TroupeExit zb =
      train({"--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zb-h1", "--trace", trace}, "zb_pp2");
  expect_same_losses(one, zb, "(zb-h1)");  // the run header names the schedule

  const TroupeExit replay = run_to_exit({"replay", trace}, "zb_replay", 60s);
  ASSERT_EQ(replay.code, std::optional<int>(0)) << replay.output;
  EXPECT_TRUE(contains(replay.output, "pipeline: zb-h1 P=2 V=1 M=2")) << replay.output;
  EXPECT_TRUE(contains(replay.output, "bubble: ")) << replay.output;
}

TEST_F(ZeroBubbleCli, ZbVTrainsLikeOneDeviceAndReplaysItsTrace) {
  const std::string trace = (dir_->path() / "zbv.trace").string();
  const TroupeExit one = train({"--devices", "1"}, "zbv_one");
  const TroupeExit zb =
      train({"--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zb-v", "--trace", trace}, "zbv_pp2");
  expect_same_losses(one, zb, "(zb-v)");
  // The virtual-stage flags may say what zb-v does anyway: two chunks per stage.
  const TroupeExit said = train({"--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zb-v",
                                 "--num-virtual-stages-per-pipeline-rank", "2"},
                                "zbv_flags");
  expect_same_losses(one, said, "(zb-v)");

  const TroupeExit replay =
      run_to_exit({"replay", trace, "--what-if", "schedule=1f1b", "--what-if", "schedule=zb-v,m=8"}, "zbv_replay", 60s);
  ASSERT_EQ(replay.code, std::optional<int>(0)) << replay.output;
  for (const char* want : {"pipeline: zb-v P=2 V=2 M=2", "bubble: ", "what-if 1f1b P=2 V=1 M=2",
                           "what-if zb-v P=2 V=2 M=8 [schedule=zb-v,m=8]"})
    EXPECT_TRUE(contains(replay.output, want)) << want << "\n" << replay.output;
}

TEST_F(ZeroBubbleCli, ZbVRefusesWhatItDoesNotPlaceNamingTheFlags) {
  struct Refusal {
    Args flags;
    std::vector<std::string> named;
  };
  const std::vector<Refusal> refusals = {
      {{}, {"--pipeline-schedule zb-v", "--pipeline-model-parallel-size > 1"}},  // one stage
      {{"--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "4"},
       {"--pipeline-schedule zb-v", "--num-virtual-stages-per-pipeline-rank must be 2"}},
      {{"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "2"},
       {"--pipeline-schedule zb-v", "--num-layers-per-virtual-pipeline-stage"}},
      {{"--pipeline-model-parallel-size", "2", "--microbatch-group-size-per-vp-stage", "2"},
       {"--pipeline-schedule zb-v", "--microbatch-group-size-per-vp-stage"}},
      {{"--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers", "1"},
       {"--pipeline-schedule zb-v", "--decoder-first-pipeline-num-layers"}},
      {{"--pipeline-model-parallel-size", "2", "--recompute-activations"},
       {"--pipeline-schedule zb-v", "--recompute-activations"}},
      {{"--pipeline-model-parallel-size", "2", "--num-experts", "2", "--disable-bias-linear"},
       {"--pipeline-schedule zb-v", "--num-experts"}},
  };
  for (const Refusal& r : refusals) {
    Args flags = r.flags;
    flags.insert(flags.end(), {"--pipeline-schedule", "zb-v"});
    const TroupeExit o = train(flags, "zbv_refused");
    EXPECT_NE(o.code, std::optional<int>(0)) << (r.flags.empty() ? "" : r.flags.back()) << "\n" << o.output;
    EXPECT_TRUE(o.code.has_value()) << "ran past the limit: " << o.output;
    for (const std::string& n : r.named) EXPECT_TRUE(contains(o.output, n)) << n << "\n" << o.output;
    EXPECT_FALSE(contains(o.output, "lm loss")) << o.output;
  }
}

TEST_F(ZeroBubbleCli, UnsupportedCombinationsAreErrorsNamingTheFlags) {
  struct Refusal {
    Args flags;
    std::vector<std::string> named;
  };
  const std::vector<Refusal> refusals = {
      {{"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"},
       {"--pipeline-schedule zb-h1", "--num-layers-per-virtual-pipeline-stage"}},
      {{"--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2"},
       {"--pipeline-schedule zb-h1", "--num-virtual-stages-per-pipeline-rank"}},
      {{"--recompute-activations"}, {"--pipeline-schedule zb-h1", "--recompute-activations"}},
      {{"--context-parallel-size", "2"}, {"--pipeline-schedule zb-h1", "--context-parallel-size"}},
      {{"--num-experts", "2", "--disable-bias-linear"}, {"--pipeline-schedule zb-h1", "--num-experts"}},
  };
  for (const Refusal& r : refusals) {
    Args flags = r.flags;
    flags.insert(flags.end(), {"--pipeline-schedule", "zb-h1"});
    const TroupeExit o = train(flags, "zb_refused");
    EXPECT_NE(o.code, std::optional<int>(0)) << r.flags.front() << "\n" << o.output;
    EXPECT_TRUE(o.code.has_value()) << "ran past the limit: " << o.output;
    for (const std::string& n : r.named) EXPECT_TRUE(contains(o.output, n)) << n << "\n" << o.output;
    EXPECT_FALSE(contains(o.output, "lm loss")) << o.output;
  }
}

}  // namespace
}  // namespace troupe::test
