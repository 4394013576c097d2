// --context-parallel-size from the `troupe` command line: on real text (Moby-Dick through `troupe
// preprocess`, GPT-2's tokenizer, dropout on) CP2, and CP2 x DP2 with the distributed optimizer,
// log the losses of --context-parallel-size 1 (within 1e-5 relative), also across a checkpoint
// saved under CP2 x DP2 and resumed on one device; a sequence that does not split into 2C chunks,
// a device count that does not split, and another --cp-comm-type stop before training naming the
// flags.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class ContextParallelCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("context_parallel_cli");
    preprocess_moby_dick(dir_->path().string(), 8);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // gpt2-tiny (4 layers, dropout 0.1) on the preprocessed text, 6 iterations of 2 microbatches.
  static TroupeExit train(const std::vector<std::string>& extra, const std::string& tag) {
    return run_to_exit(moby_dick_train_args(dir_->path().string(), "gpt2-tiny", 6, "1e-3", extra), tag, 300s);
  }

  static TempDir* dir_;
};

TempDir* ContextParallelCli::dir_ = nullptr;

// Every iteration logged by `one` is logged by `cp` within 1e-5 relative.
void expect_close_losses(const std::map<int64_t, std::string>& cp, const std::map<int64_t, std::string>& one) {
  ASSERT_EQ(cp.size(), 6u);
  ASSERT_EQ(one.size(), 6u);
  for (const auto& [it, loss] : one) {
    ASSERT_TRUE(cp.count(it)) << "iteration " << it;
    const double x = std::stod(cp.at(it)), y = std::stod(loss);
    EXPECT_LT(std::abs(x - y) / std::abs(y), 1e-5) << "iteration " << it << ": " << x << " vs " << y;
  }
}

void expect_close_losses(const TroupeExit& cp, const TroupeExit& one) {
  ASSERT_EQ(cp.code, std::optional<int>(0)) << cp.output;
  ASSERT_EQ(one.code, std::optional<int>(0)) << one.output;
  expect_close_losses(logged_losses(cp.output), logged_losses(one.output));
}

TEST_F(ContextParallelCli, LogsTheLossesOfOneContextRank) {
  const TroupeExit one = train({"--context-parallel-size", "1"}, "cp1");
  const TroupeExit cp2 = train({"--devices", "2", "--context-parallel-size", "2"}, "cp2");
  EXPECT_TRUE(contains(cp2.output, "tensor 1 x context 2 x pipeline 1")) << cp2.output;
  expect_close_losses(cp2, one);
  const TroupeExit cp2dp2 =
      train({"--devices", "4", "--context-parallel-size", "2", "--use-distributed-optimizer", "--cp-comm-type", "p2p"},
            "cp2dp2");
  EXPECT_TRUE(contains(cp2dp2.output, "x data 2 (distributed optimizer)")) << cp2dp2.output;
  expect_close_losses(cp2dp2, one);
}

// A checkpoint of CP2 x DP2 (distributed optimizer) resumes on one device where the run left off.
TEST_F(ContextParallelCli, CheckpointsResumeInAnotherLayout) {
  const TroupeExit straight = train({}, "cp_straight");
  const std::string ckpt = *dir_ / "ckpt";
  const TroupeExit first = train({"--devices", "4", "--context-parallel-size", "2", "--use-distributed-optimizer",
                                  "--save", ckpt, "--exit-interval", "3"},
                                 "cp_save");
  ASSERT_EQ(first.code, std::optional<int>(0)) << first.output;
  const TroupeExit resumed = train({"--load", ckpt}, "cp_resume");
  ASSERT_EQ(resumed.code, std::optional<int>(0)) << resumed.output;
  ASSERT_EQ(straight.code, std::optional<int>(0)) << straight.output;
  std::map<int64_t, std::string> both = logged_losses(first.output);
  for (const auto& [it, loss] : logged_losses(resumed.output)) both[it] = loss;
  expect_close_losses(both, logged_losses(straight.output));
}

TEST_F(ContextParallelCli, BadInputExitsNamingTheFlags) {
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases = {
      {{"--devices", "3", "--context-parallel-size", "3"}, {"--seq-length (32)", "--context-parallel-size (2 x 3)"}},
      {{"--devices", "2", "--context-parallel-size", "2", "--cp-comm-type", "a2a"}, {"--cp-comm-type a2a"}},
      {{"--devices", "3", "--context-parallel-size", "2"}, {"--devices (3", "--context-parallel-size (2)"}},
  };
  for (const Case& c : cases) {
    const TroupeExit o = train(c.flags, "cp_refused");
    ASSERT_TRUE(o.code.has_value()) << o.output;
    EXPECT_NE(*o.code, 0) << o.output;
    for (const std::string& n : c.named) EXPECT_TRUE(contains(o.output, n)) << n << "\n" << o.output;
    EXPECT_FALSE(contains(o.output, "iteration ")) << o.output;
  }
}

}  // namespace
}  // namespace troupe::test
