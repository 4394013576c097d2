// MoE top-k routing on the CPU: picks and weights on a hand-made row for each score function,
// and the backward against finite differences.
#include <cmath>

#include "kernels/moe_routing.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct Routed {
  Tensor probs, experts;
};
Routed route(const Tensor& logits, const Tensor& bias, const MoeTopk& t) {
  Routed r{Tensor::host(DType::f32, {logits.dim(0), t.topk}), Tensor::host(DType::i32, {logits.dim(0), t.topk})};
  moe_topk_forward(cpu(), logits, bias, t, r.probs, r.experts);
  return r;
}

TEST(MoeTopk, SoftmaxAfterTopkNormalizesOverThePicks) {
  Tensor logits = Tensor::host_f32({1, 4}, {1.0f, 3.0f, 2.0f, 0.0f});
  Routed r = route(logits, Tensor(), {.topk = 2});
  EXPECT_EQ(r.experts.data_as<int32_t>()[0], 1);
  EXPECT_EQ(r.experts.data_as<int32_t>()[1], 2);
  const double p1 = 1.0 / (1.0 + std::exp(-1.0));  // softmax of (3, 2)
  EXPECT_NEAR(r.probs.at(0), p1, 1e-6);
  EXPECT_NEAR(r.probs.at(1), 1.0 - p1, 1e-6);
}

TEST(MoeTopk, PreSoftmaxKeepsTheFullSoftmaxAndScales) {
  Tensor logits = Tensor::host_f32({1, 4}, {1.0f, 3.0f, 2.0f, 0.0f});
  Routed r = route(logits, Tensor(), {.topk = 2, .pre_softmax = true, .scaling_factor = 2.5f});
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  EXPECT_NEAR(r.probs.at(0), 2.5 * std::exp(3.0) / z, 1e-5);
  EXPECT_NEAR(r.probs.at(1), 2.5 * std::exp(2.0) / z, 1e-5);
}

TEST(MoeTopk, SigmoidBiasChoosesButDoesNotWeigh) {
  Tensor logits = Tensor::host_f32({1, 4}, {1.0f, 3.0f, 2.0f, 0.0f});
  Tensor bias = Tensor::host_f32({4}, {0.0f, 0.0f, -1.0f, 1.0f});  // expert 3 in, expert 2 out
  Routed r = route(logits, bias, {.topk = 2, .score_function = MoeScoreFunction::sigmoid});
  EXPECT_EQ(r.experts.data_as<int32_t>()[0], 3);  // sigmoid(0) + 1 = 1.5 > sigmoid(3) = 0.95
  EXPECT_EQ(r.experts.data_as<int32_t>()[1], 1);
  auto sg = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  EXPECT_NEAR(r.probs.at(0), sg(0) / (sg(0) + sg(3)), 1e-6);
  EXPECT_NEAR(r.probs.at(1), sg(3) / (sg(0) + sg(3)), 1e-6);
}

TEST(MoeTopk, TiesGoToTheLowerExpert) {
  Tensor logits = Tensor::host_f32({1, 4}, {2.0f, 1.0f, 2.0f, 2.0f});
  Routed r = route(logits, Tensor(), {.topk = 2});
  EXPECT_EQ(r.experts.data_as<int32_t>()[0], 0);
  EXPECT_EQ(r.experts.data_as<int32_t>()[1], 2);
}

TEST(MoeTopk, RefusesTopkAboveExperts) {
  Tensor logits = random_normal({2, 4}, 1);
  EXPECT_THROW(route(logits, Tensor(), {.topk = 5}), Error);
}

class MoeTopkGrad : public ::testing::TestWithParam<MoeTopk> {};

TEST_P(MoeTopkGrad, BackwardMatchesFiniteDifferences) {
  const MoeTopk t = GetParam();
  const int64_t n = 6, e = 8;
  Tensor logits = random_normal({n, e}, 7, 1.5f);
  Tensor bias = t.score_function == MoeScoreFunction::sigmoid ? random_normal({e}, 8, 0.1f) : Tensor();
  Tensor proj = random_normal({n, t.topk}, 9);
  Routed r = route(logits, bias, t);
  Tensor dlogits = Tensor::host_f32({n, e}, std::vector<float>(size_t(n * e), 0.5f));  // accumulates onto 0.5
  moe_topk_backward(cpu(), logits, r.experts, proj, t, dlogits);
  for (int64_t i = 0; i < dlogits.numel(); ++i) dlogits.at(i) -= 0.5f;
  auto loss = [&] {
    Routed q = route(logits, bias, t);
    for (int64_t i = 0; i < q.experts.numel(); ++i)  // the picks must not move under the probe
      if (q.experts.data_as<int32_t>()[i] != r.experts.data_as<int32_t>()[i]) return 1e9;
    return dot(q.probs, proj);
  };
  expect_grad_close("dlogits", loss, logits, dlogits, 32, 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, MoeTopkGrad,
    ::testing::Values(MoeTopk{.topk = 2}, MoeTopk{.topk = 3, .pre_softmax = true},
                      MoeTopk{.topk = 1, .pre_softmax = true},
                      MoeTopk{.topk = 2, .score_function = MoeScoreFunction::sigmoid, .scaling_factor = 2.5f},
                      MoeTopk{.topk = 1, .score_function = MoeScoreFunction::sigmoid}));

}  // namespace
}  // namespace troupe::test
