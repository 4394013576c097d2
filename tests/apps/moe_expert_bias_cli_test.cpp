// The MoE expert bias from the `troupe` command line (issue 20): --moe-router-enable-expert-bias
// with two data-parallel replicas and --save trains (no longer refused), the checkpoint holds
// each MoE layer's bias as Megatron's decoder.layers.N.mlp.router.expert_bias (f32 [E], not all
// still zero), and --load resumes the run digit for digit (the bias update rate is
// large, so a resumed run without the stored bias would route otherwise).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "storage/checkpoint_reader.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

TEST(MoeExpertBiasCli, DataParallelSavesTheBiasAndResumesExactly) {
  TempDir dir("moe_expert_bias_cli");
  preprocess_moby_dick(dir.path().string(), 8);
  const std::string ckpt = dir / "ckpt";
  auto train = [&](const std::vector<std::string>& extra, const std::string& tag) {
    std::vector<std::string> flags = {"--num-experts",
                                      "4",
                                      "--moe-router-topk",
                                      "2",
                                      "--moe-ffn-hidden-size",
                                      "64",
                                      "--moe-router-score-function",
                                      "sigmoid",
                                      "--moe-router-load-balancing-type",
                                      "none",
                                      "--moe-router-enable-expert-bias",
                                      "--moe-router-bias-update-rate",
                                      "0.05",
                                      "--devices",
                                      "2",
                                      "--use-distributed-optimizer"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return run_to_exit(moby_dick_train_args(dir.path().string(), "llama-tiny", 8, "2e-3", flags), tag, 300s);
  };
  const TroupeExit full = train({"--save", ckpt, "--save-interval", "4"}, "moe_bias_full");
  ASSERT_EQ(full.code, std::optional<int>(0)) << full.output;
  const std::map<int64_t, std::string> losses = logged_losses(full.output);
  ASSERT_EQ(losses.size(), 8u) << full.output;

  const CheckpointReader r = CheckpointReader::open(ckpt, 4);
  float moved = 0;               // the largest |bias| of any layer
  for (int l = 0; l < 4; ++l) {  // llama-tiny: 4 layers, every one MoE
    const std::string name = "decoder.layers." + std::to_string(l) + ".mlp.router.expert_bias";
    ASSERT_TRUE(r.has(name)) << name;
    const Tensor bias = r.expect(name, {4});
    ASSERT_EQ(bias.dtype(), DType::f32) << name;
    for (int e = 0; e < 4; ++e) moved = std::max(moved, std::abs(bias.data_as<float>()[e]));
  }
  EXPECT_GT(moved, 0.04f) << "no bias moved from its zero init";

  const TroupeExit resumed = train({"--load", ckpt, "--ckpt-step", "4"}, "moe_bias_resumed");
  ASSERT_EQ(resumed.code, std::optional<int>(0)) << resumed.output;
  const std::map<int64_t, std::string> again = logged_losses(resumed.output);
  ASSERT_EQ(again.size(), 4u) << resumed.output;
  for (const auto& [it, loss] : again) EXPECT_EQ(loss, losses.at(it)) << "iteration " << it;
}

}  // namespace
}  // namespace troupe::test
