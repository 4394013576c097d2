// Mixture of experts from the `troupe` command line (issue 20): a Llama-style model with four
// experts (top-2) trains on real text (Moby-Dick through `troupe preprocess`), its loss falls,
// the log line shows Megatron's load_balancing_loss and the expert load; the checkpoint holds
// each expert under its global name, and --load resumes the run digit for digit. Bad input
// stops before training, naming the flags.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "storage/checkpoint_reader.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class MoeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("moe_cli");
    preprocess_moby_dick(dir_->path().string(), 8);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // llama-tiny (4 layers, every one MoE) on the preprocessed text, 2 microbatches an iteration.
  static TroupeExit train(int64_t iters, const std::vector<std::string>& extra, const std::string& tag,
                          const std::string& model = "llama-tiny",
                          const std::vector<std::string>& moe = {"--num-experts", "4", "--moe-router-topk", "2"}) {
    std::vector<std::string> flags = {"--moe-aux-loss-coeff", "1e-2", "--moe-ffn-hidden-size", "64"};
    flags.insert(flags.end(), moe.begin(), moe.end());
    flags.insert(flags.end(), extra.begin(), extra.end());
    return run_to_exit(moby_dick_train_args(dir_->path().string(), model, iters, "2e-3", flags), tag, 300s);
  }

  static TempDir* dir_;
};

TempDir* MoeCli::dir_ = nullptr;

TEST_F(MoeCli, TrainsLogsRouterLossSavesExpertsAndResumesExactly) {
  const std::string ckpt = *dir_ / "ckpt";
  const TroupeExit full = train(12, {"--save", ckpt, "--save-interval", "6"}, "moe_full");
  ASSERT_EQ(full.code, std::optional<int>(0)) << full.output;
  EXPECT_TRUE(contains(full.output, "mixture of experts: 4 experts, top-2")) << full.output;
  EXPECT_TRUE(contains(full.output, "| load_balancing_loss: ")) << full.output;
  EXPECT_TRUE(contains(full.output, "| expert load max/mean: 0: ")) << full.output;
  EXPECT_FALSE(contains(full.output, "z_loss")) << "no --moe-z-loss-coeff: no z_loss field";
  const std::map<int64_t, std::string> losses = logged_losses(full.output);
  ASSERT_EQ(losses.size(), 12u) << full.output;
  EXPECT_LT(std::stod(losses.at(12)), std::stod(losses.at(1)) - 0.5) << "the loss did not fall";

  // Every expert of every layer by its global name; no dense MLP.
  const CheckpointReader r = CheckpointReader::open(ckpt);
  const std::vector<std::string> names = r.names();
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (int l = 0; l < 4; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".mlp.";
    EXPECT_TRUE(has(p + "router.weight")) << p;
    for (int e = 0; e < 4; ++e) {
      EXPECT_TRUE(has(p + "experts." + std::to_string(e) + ".linear_fc1.weight")) << p << e;
      EXPECT_TRUE(has(p + "experts." + std::to_string(e) + ".linear_fc2.weight")) << p << e;
    }
    EXPECT_FALSE(has(p + "linear_fc1.weight")) << p;
  }

  // From the checkpoint of iteration 6 (the tracker names 12: ask for 6): iterations 7..12 again.
  const TroupeExit resumed = train(12, {"--load", ckpt, "--ckpt-step", "6"}, "moe_resumed");
  ASSERT_EQ(resumed.code, std::optional<int>(0)) << resumed.output;
  const std::map<int64_t, std::string> again = logged_losses(resumed.output);
  ASSERT_EQ(again.size(), 6u) << resumed.output;
  for (const auto& [it, loss] : again) EXPECT_EQ(loss, losses.at(it)) << "iteration " << it;
}

// Qwen2-MoE's gated shared expert: the gate is a trained weight of the checkpoint.
TEST_F(MoeCli, SharedExpertGateIsTrainedAndSaved) {
  const std::string ckpt = *dir_ / "ckpt_gate";
  const TroupeExit o = train(2,
                             {"--moe-shared-expert-intermediate-size", "32", "--moe-shared-expert-gate", "--save", ckpt,
                              "--save-interval", "2"},
                             "moe_gate");
  ASSERT_EQ(o.code, std::optional<int>(0)) << o.output;
  const std::vector<std::string> names = CheckpointReader::open(ckpt).names();
  for (int l = 0; l < 4; ++l) {
    const std::string n = "decoder.layers." + std::to_string(l) + ".mlp.shared_experts.gate_weight";
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

TEST_F(MoeCli, BadInputStopsNamingTheFlags) {
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> named;
    std::string model = "llama-tiny";
    std::vector<std::string> moe = {"--num-experts", "4", "--moe-router-topk", "2"};
  };
  const std::vector<Case> cases = {
      {{}, {"--moe-router-topk 5", "--num-experts 4"}, "llama-tiny", {"--num-experts", "4", "--moe-router-topk", "5"}},
      {{}, {"--num-experts", "--disable-bias-linear"}, "gpt2-tiny"},
      {{"--tensor-model-parallel-size", "2", "--expert-tensor-parallel-size", "1"},
       {"--expert-tensor-parallel-size 1", "--tensor-model-parallel-size 2"}},
      {{"--expert-model-parallel-size", "3"}, {"--expert-model-parallel-size 3", "--num-experts 4"}},
      {{"--expert-tensor-parallel-size", "2"}, {"--expert-tensor-parallel-size 2", "--tensor-model-parallel-size 1"}},
      {{"--moe-router-enable-expert-bias"}, {"--moe-router-enable-expert-bias", "sigmoid"}},
      {{"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
       {"--recompute-granularity full", "--num-experts"}},
      {{"--moe-input-jitter-eps", "0.1"}, {"--moe-input-jitter-eps"}},
      {{"--moe-shared-expert-gate"}, {"--moe-shared-expert-gate", "--moe-shared-expert-intermediate-size"}},
  };
  for (const Case& c : cases) {
    const TroupeExit o = train(2, c.flags, "moe_refused", c.model, c.moe);
    ASSERT_TRUE(o.code.has_value()) << o.output;
    EXPECT_NE(*o.code, 0) << o.output;
    for (const std::string& n : c.named) EXPECT_TRUE(contains(o.output, n)) << n << "\n" << o.output;
    EXPECT_FALSE(contains(o.output, "iteration ")) << o.output;
  }
  // An MoE flag without --num-experts.
  const TroupeExit o = run_to_exit(tiny_train_args(1, {"--moe-router-topk", "2"}), "moe_no_experts", 60s);
  EXPECT_EQ(o.code, std::optional<int>(1)) << o.output;
  EXPECT_TRUE(contains(o.output, "--moe-router-topk is a mixture-of-experts flag: give --num-experts")) << o.output;
}

}  // namespace
}  // namespace troupe::test
