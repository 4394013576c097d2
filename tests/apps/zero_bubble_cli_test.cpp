// --pipeline-schedule zb-h1 from the `troupe` command line: on real text (Moby-Dick through `troupe
// preprocess`, GPT-2's tokenizer, dropout on) PP2 logs the losses of one device (within 1e-5
// relative) and writes a --trace of zb-h1 B and W ops that `troupe replay` reads and reports a
// bubble for; interleaving and the features the split backward does not support stop before
// training naming the flags.
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

TEST_F(ZeroBubbleCli, TrainsLikeOneDeviceAndReplaysItsTrace) {
  const std::string trace = (dir_->path() / "zb.trace").string();
  const TroupeExit one = train({"--devices", "1"}, "zb_one");
  const TroupeExit zb =
      train({"--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zb-h1", "--trace", trace}, "zb_pp2");
  ASSERT_EQ(one.code, std::optional<int>(0)) << one.output;
  ASSERT_EQ(zb.code, std::optional<int>(0)) << zb.output;
  EXPECT_TRUE(contains(zb.output, "(zb-h1)")) << zb.output;  // the run header names the schedule
  const std::map<int64_t, std::string> want = logged_losses(one.output), got = logged_losses(zb.output);
  ASSERT_EQ(want.size(), 4u) << one.output;
  ASSERT_EQ(got.size(), want.size()) << zb.output;
  for (const auto& [it, loss] : want) {
    const double x = std::stod(got.at(it)), y = std::stod(loss);
    EXPECT_LT(std::abs(x - y) / std::abs(y), 1e-5) << "iteration " << it << ": " << x << " vs " << y;
  }

  const TroupeExit replay = run_to_exit({"replay", trace}, "zb_replay", 60s);
  ASSERT_EQ(replay.code, std::optional<int>(0)) << replay.output;
  EXPECT_TRUE(contains(replay.output, "pipeline: zb-h1 P=2 V=1 M=2")) << replay.output;
  EXPECT_TRUE(contains(replay.output, "bubble: ")) << replay.output;
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
