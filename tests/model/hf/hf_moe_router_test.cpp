// The routers of Mixtral, Qwen2-MoE and Qwen3-MoE as transformers computes them (softmax over
// all experts, top k, renormalized for Mixtral and for Qwen with norm_topk_prob) against
// Megatron's top-k routing with the flags the HF config reader maps them to: the same experts
// with the same weights, for every family and both norm_topk_prob values.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/moe_routing.hpp"
#include "model/hf/hf_config.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

using nlohmann::json;

json fixture(const std::string& name) {
  std::ifstream in(std::filesystem::path(TROUPE_SOURCE_DIR) / "tests/model/hf/configs" / name);
  EXPECT_TRUE(in.good()) << name;
  return json::parse(in);
}

// transformers' MixtralTopKRouter / Qwen3MoeTopKRouter on one row of logits: (expert, weight) pairs
// in torch.topk's order (descending).
std::vector<std::pair<int, double>> hf_route(const float* logits, int E, int k, bool renormalize) {
  std::vector<double> p(size_t(E), 0.0);
  const double top = *std::max_element(logits, logits + E);
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += p[size_t(e)] = std::exp(double(logits[e]) - top);
  for (double& v : p) v /= sum;
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
  std::vector<std::pair<int, double>> picked;
  double picked_sum = 0;
  for (int i = 0; i < k; ++i) picked_sum += p[size_t(order[size_t(i)])];
  for (int i = 0; i < k; ++i) {
    const int e = order[size_t(i)];
    picked.emplace_back(e, renormalize ? p[size_t(e)] / picked_sum : p[size_t(e)]);
  }
  return picked;
}

TEST(HfMoeRouter, MegatronRoutingWithTheMappedFlagsIsTransformersRouter) {
  const struct {
    const char* fixture;
    const char* norm_topk_prob;  // "" keeps the file's
    bool renormalize;            // what transformers does
  } cases[] = {{"mixtral.transformers5.json", "", true},
               {"qwen2-moe.transformers5.json", "", false},
               {"qwen3-moe.transformers5.json", "", true},
               {"qwen3-moe.transformers5.json", "false", false},
               {"qwen2-moe.transformers5.json", "true", true}};
  for (const auto& c : cases) {
    json j = fixture(c.fixture);
    if (*c.norm_topk_prob) j["norm_topk_prob"] = std::string(c.norm_topk_prob) == "true";
    const MoeConfig m = read_hf_config(j, c.fixture).model.moe;
    const int E = m.num_experts, K = m.moe_router_topk;
    const int64_t N = 64;
    const Tensor logits = random_normal({N, E}, 5, 2.0f);
    Tensor probs = Tensor::host(DType::f32, {N, K}), experts = Tensor::host(DType::i32, {N, K});
    cpu::moe_topk_forward(logits, Tensor(), m.topk(), probs, experts);
    for (int64_t n = 0; n < N; ++n) {
      const auto hf = hf_route(logits.data_as<float>() + n * E, E, K, c.renormalize);
      for (int i = 0; i < K; ++i) {
        EXPECT_EQ(experts.data_as<int32_t>()[n * K + i], hf[size_t(i)].first)
            << c.fixture << " " << c.norm_topk_prob << " row " << n << " choice " << i;
        EXPECT_NEAR(probs.data_as<float>()[n * K + i], hf[size_t(i)].second, 1e-6)
            << c.fixture << " " << c.norm_topk_prob << " row " << n << " choice " << i;
      }
    }
  }
}

}  // namespace
}  // namespace troupe::test
