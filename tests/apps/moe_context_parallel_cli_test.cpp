// --context-parallel-size with --num-experts from the `troupe` command line: a Llama-style MoE
// model (four experts, top-2, aux_loss and z-loss) on Moby-Dick logs the losses of
// --context-parallel-size 1 (within 1e-5 relative) under CP2 on two CPU devices and under CP2 x
// EP2 (each device two experts, the expert group being the context ranks), and the same expert
// load, digit for digit; capacity dropping with context parallelism stops before training,
// naming both flags.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class MoeContextParallelCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("moe_cp_cli");
    preprocess_moby_dick(dir_->path().string(), 8);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // llama-tiny (4 layers, every one MoE), 6 iterations.
  static TroupeExit train(const std::vector<std::string>& extra, const std::string& tag) {
    std::vector<std::string> flags = {"--num-experts",         "4",    "--moe-router-topk",  "2",
                                      "--moe-aux-loss-coeff",  "1e-2", "--moe-z-loss-coeff", "1e-3",
                                      "--moe-ffn-hidden-size", "64"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return run_to_exit(moby_dick_train_args(dir_->path().string(), "llama-tiny", 6, "2e-3", flags), tag, 300s);
  }

  static TempDir* dir_;
};

TempDir* MoeContextParallelCli::dir_ = nullptr;

// The expert load each logged iteration shows (" 0: max/mean 1: ..."), by line order.
std::vector<std::string> logged_expert_loads(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  const std::string key = "expert load max/mean:";
  for (std::string line; std::getline(in, line);)
    if (const size_t at = line.find(key); at != std::string::npos) out.push_back(line.substr(at + key.size()));
  return out;
}

void expect_same_training(const TroupeExit& cp, const TroupeExit& one) {
  ASSERT_EQ(cp.code, std::optional<int>(0)) << cp.output;
  ASSERT_EQ(one.code, std::optional<int>(0)) << one.output;
  const std::map<int64_t, std::string> a = logged_losses(cp.output), b = logged_losses(one.output);
  ASSERT_EQ(a.size(), 6u) << cp.output;
  ASSERT_EQ(b.size(), 6u) << one.output;
  for (const auto& [it, loss] : b) {
    ASSERT_TRUE(a.count(it)) << "iteration " << it;
    const double x = std::stod(a.at(it)), y = std::stod(loss);
    EXPECT_LT(std::abs(x - y) / std::abs(y), 1e-5) << "iteration " << it << ": " << x << " vs " << y;
  }
  const std::vector<std::string> la = logged_expert_loads(cp.output), lb = logged_expert_loads(one.output);
  ASSERT_EQ(lb.size(), 6u) << one.output;
  EXPECT_EQ(la, lb);
  EXPECT_TRUE(contains(cp.output, "| load_balancing_loss: ")) << cp.output;
  EXPECT_TRUE(contains(cp.output, "| z_loss: ")) << cp.output;
}

TEST_F(MoeContextParallelCli, LogsTheLossesOfOneContextRank) {
  const TroupeExit one = train({"--context-parallel-size", "1"}, "moe_cp1");
  const TroupeExit cp2 = train({"--devices", "2", "--context-parallel-size", "2"}, "moe_cp2");
  EXPECT_TRUE(contains(cp2.output, "tensor 1 x context 2 x pipeline 1")) << cp2.output;
  expect_same_training(cp2, one);
  const TroupeExit cp2ep2 =
      train({"--devices", "2", "--context-parallel-size", "2", "--expert-model-parallel-size", "2"}, "moe_cp2ep2");
  expect_same_training(cp2ep2, one);
}

TEST_F(MoeContextParallelCli, CapacityDroppingExitsNamingBothFlags) {
  const TroupeExit o =
      train({"--devices", "2", "--context-parallel-size", "2", "--moe-expert-capacity-factor", "1.0"}, "moe_cp_drop");
  ASSERT_TRUE(o.code.has_value()) << o.output;
  EXPECT_NE(*o.code, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "--moe-expert-capacity-factor (1)")) << o.output;
  EXPECT_TRUE(contains(o.output, "--context-parallel-size 2")) << o.output;
  EXPECT_FALSE(contains(o.output, "iteration ")) << o.output;
}

}  // namespace
}  // namespace troupe::test
