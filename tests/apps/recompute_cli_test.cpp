// Megatron's activation-recompute flags from the `troupe` command line (issue 22): on real text
// (Moby-Dick through `troupe preprocess`, GPT-2's tokenizer, dropout on) full and selective
// recompute log the same losses as no recompute, digit for digit, on one device and on a
// TP2+SP x PP2 layout; every conflicting combination stops before training with a non-zero exit
// naming the flag.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class RecomputeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("recompute_cli");
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

TempDir* RecomputeCli::dir_ = nullptr;

void expect_same_losses(const TroupeExit& with, const TroupeExit& without) {
  ASSERT_EQ(with.code, std::optional<int>(0)) << with.output;
  ASSERT_EQ(without.code, std::optional<int>(0)) << without.output;
  const auto a = logged_losses(with.output), b = logged_losses(without.output);
  EXPECT_EQ(a.size(), 6u) << with.output;
  EXPECT_EQ(a, b) << with.output << "\n----\n" << without.output;
}

TEST_F(RecomputeCli, FullAndSelectiveLogTheSameLossesAsNone) {
  const TroupeExit none = train({}, "recompute_none");
  const TroupeExit full =
      train({"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
            "recompute_full");
  EXPECT_TRUE(contains(full.output, "activation recompute: full uniform 1")) << full.output;
  expect_same_losses(full, none);
  const TroupeExit selective =
      train({"--recompute-activations", "--recompute-modules", "core_attn", "layernorm", "mlp"}, "recompute_sel");
  EXPECT_TRUE(contains(selective.output, "activation recompute: selective core_attn layernorm mlp"))
      << selective.output;
  expect_same_losses(selective, none);
}

TEST_F(RecomputeCli, TensorSequenceAndPipelineParallelLogTheSameLosses) {
  const std::vector<std::string> layout = {
      "--devices", "4", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--pipeline-model-parallel-size",
      "2"};
  const TroupeExit none = train(layout, "recompute_layout_none");
  std::vector<std::string> block = layout;
  block.insert(block.end(),
               {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"});
  expect_same_losses(train(block, "recompute_layout_block"), none);
}

TEST_F(RecomputeCli, ConflictsExitNamingTheFlag) {
  struct Case {
    std::vector<std::string> flags;
    std::string named;
  };
  const std::vector<Case> cases = {
      {{"--recompute-method", "uniform"}, "--recompute-method uniform needs --recompute-granularity full"},
      {{"--recompute-granularity", "selective", "--recompute-method", "block"}, "--recompute-method block needs"},
      {{"--recompute-num-layers", "1"}, "--recompute-num-layers 1 needs --recompute-granularity full"},
      {{"--recompute-granularity", "full"}, "--recompute-granularity full needs --recompute-method"},
      {{"--recompute-granularity", "full", "--recompute-method", "uniform"},
       "--recompute-granularity full needs --recompute-num-layers"},
      {{"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "5"},
       "--recompute-num-layers 5 with --recompute-method block is more than the 4 layers"},
      {{"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "0"},
       "--recompute-num-layers"},
      {{"--recompute-modules", "mlp"}, "--recompute-modules needs --recompute-granularity selective"},
      {{"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
        "--recompute-modules", "mlp"},
       "--recompute-modules needs"},
      {{"--recompute-activations", "--recompute-modules", "moe"}, "--recompute-modules moe: mixture of experts"},
      {{"--recompute-activations", "--recompute-modules", "mla_up_proj"}, "--recompute-modules mla_up_proj"},
      {{"--recompute-activations", "--recompute-granularity", "full"}, "--recompute-activations (selective) and"},
      {{"--recompute-granularity", "partial"}, "--recompute-granularity"},
  };
  for (const Case& c : cases) expect_train_refused(c.flags, c.named, "recompute_refused");
}

}  // namespace
}  // namespace troupe::test
