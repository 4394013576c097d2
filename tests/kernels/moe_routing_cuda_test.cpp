// CUDA MoE top-k routing against the CPU backend, for every score function, also on exact ties.
#include <algorithm>
#include <cmath>
#include <functional>

#include "kernels/moe_routing.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

class MoeTopkCuda : public ::testing::TestWithParam<MoeTopk> {};

TEST_P(MoeTopkCuda, MatchesCpu) {
  const MoeTopk t = GetParam();
  const int64_t n = 300, e = 64;
  Tensor logits = random_normal({n, e}, 11, 2.0f);
  Tensor bias = t.score_function == MoeScoreFunction::sigmoid ? random_normal({e}, 12, 0.05f) : Tensor();
  Tensor dprobs = random_normal({n, t.topk}, 13);
  Tensor probs = Tensor::host(DType::f32, {n, t.topk}), experts = Tensor::host(DType::i32, {n, t.topk});
  Tensor dlogits = random_normal({n, e}, 14);  // accumulates onto this
  Tensor dlogits_cpu = Tensor::host(DType::f32, {n, e});
  std::copy(dlogits.data_as<float>(), dlogits.data_as<float>() + n * e, dlogits_cpu.data_as<float>());
  moe_topk_forward(cpu(), logits, bias, t, probs, experts);
  moe_topk_backward(cpu(), logits, experts, dprobs, t, dlogits_cpu);

  Tensor ld = to_device(gpu(), logits, DType::f32), dpd = to_device(gpu(), dprobs, DType::f32);
  Tensor bd = bias.defined() ? to_device(gpu(), bias, DType::f32) : Tensor();
  Tensor pd = Tensor::empty(gpu(), DType::f32, {n, t.topk}), ed = Tensor::empty(gpu(), DType::i32, {n, t.topk});
  Tensor dld = to_device(gpu(), dlogits, DType::f32);
  moe_topk_forward(gpu(), ld, bd, t, pd, ed);
  moe_topk_backward(gpu(), ld, ed, dpd, t, dld);
  Tensor e_host = to_host_f32(gpu(), ed);
  for (int64_t i = 0; i < n * t.topk; ++i)
    ASSERT_EQ(e_host.data_as<int32_t>()[i], experts.data_as<int32_t>()[i]) << "choice " << i;
  EXPECT_LT(rel_error(to_host_f32(gpu(), pd), probs), 1e-5);
  EXPECT_LT(rel_error(to_host_f32(gpu(), dld), dlogits_cpu), 1e-5);
}

// Integer logits (and a bias of quarters): many rows hold exactly equal scores at the top-k
// boundary, where only the tie rule (the lower expert first) decides the picks and their order.
TEST_P(MoeTopkCuda, BreaksTiesLikeCpu) {
  const MoeTopk t = GetParam();
  const int64_t n = 512, e = 16;
  Tensor logits = random_normal({n, e}, 15, 1.5f);
  for (int64_t i = 0; i < logits.numel(); ++i) logits.at(i) = std::round(logits.at(i));
  Tensor bias;
  if (t.score_function == MoeScoreFunction::sigmoid) {
    bias = Tensor::host(DType::f32, {e});
    for (int64_t j = 0; j < e; ++j) bias.at(j) = 0.25f * float(j % 3);
  }
  Tensor probs = Tensor::host(DType::f32, {n, t.topk}), experts = Tensor::host(DType::i32, {n, t.topk});
  moe_topk_forward(cpu(), logits, bias, t, probs, experts);
  // Precondition: the data has ties at the boundary (else this test could not fail).
  int64_t tied_rows = 0;
  for (int64_t row = 0; row < n; ++row) {
    std::vector<float> s(static_cast<size_t>(e));
    for (int64_t j = 0; j < e; ++j) {
      const float l = logits.at(row * e + j);
      s[size_t(j)] = t.score_function == MoeScoreFunction::sigmoid ? 1.0f / (1.0f + std::exp(-l)) + bias.at(j) : l;
    }
    std::sort(s.begin(), s.end(), std::greater<>());
    tied_rows += t.topk < e && s[size_t(t.topk - 1)] == s[size_t(t.topk)];
  }
  EXPECT_GT(tied_rows, 0);

  Tensor pd = Tensor::empty(gpu(), DType::f32, {n, t.topk}), ed = Tensor::empty(gpu(), DType::i32, {n, t.topk});
  moe_topk_forward(gpu(), to_device(gpu(), logits, DType::f32),
                   bias.defined() ? to_device(gpu(), bias, DType::f32) : Tensor(), t, pd, ed);
  Tensor e_host = to_host_f32(gpu(), ed);
  for (int64_t i = 0; i < n * t.topk; ++i)
    ASSERT_EQ(e_host.data_as<int32_t>()[i], experts.data_as<int32_t>()[i]) << "choice " << i;
  EXPECT_LT(rel_error(to_host_f32(gpu(), pd), probs), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, MoeTopkCuda,
    ::testing::Values(MoeTopk{.topk = 2}, MoeTopk{.topk = 6, .pre_softmax = true},
                      MoeTopk{.topk = 1, .pre_softmax = true},
                      MoeTopk{.topk = 8, .score_function = MoeScoreFunction::sigmoid, .scaling_factor = 2.5f},
                      MoeTopk{.topk = 1, .score_function = MoeScoreFunction::sigmoid}));

}  // namespace
}  // namespace troupe::test
