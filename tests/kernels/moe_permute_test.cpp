// MoE permute / unpermute on the CPU: a hand-made map with a dropped choice and a padding row,
// and the backwards as the adjoints of the forwards.
#include "kernels/moe_permute.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// 3 tokens, top-2. Expert 0 rows 0-1: (t0,c0), (t2,c1); expert 1 rows 2-4: (t0,c1), (t1,c0),
// padding. Token 1's choice 1 and token 2's choice 0 were dropped.
MoeRowMap example_map() {
  Tensor row_choice = Tensor::host(DType::i32, {5}), choice_row = Tensor::host(DType::i32, {3, 2});
  const int32_t rc[] = {0, 5, 1, 2, -1};
  const int32_t cr[] = {0, 2, 3, -1, -1, 1};
  std::copy(rc, rc + 5, row_choice.data_as<int32_t>());
  std::copy(cr, cr + 6, choice_row.data_as<int32_t>());
  return {row_choice, choice_row};
}

TEST(MoePermute, GathersRowsAndZeroesPadding) {
  Tensor x = Tensor::host_f32({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor xp = Tensor::host(DType::f32, {5, 2});
  moe_permute_forward(cpu(), x, example_map(), xp);
  const std::vector<float> want = {1, 2, 5, 6, 1, 2, 3, 4, 0, 0};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(xp.at(i), want[size_t(i)]) << i;
}

TEST(MoeUnpermute, WeightsAndSumsKeptChoices) {
  Tensor yp = Tensor::host_f32({5, 2}, {1, 1, 2, 2, 3, 3, 4, 4, 9, 9});
  Tensor probs = Tensor::host_f32({3, 2}, {0.5f, 0.25f, 0.75f, 0.0f, 0.0f, 1.0f});
  Tensor y = Tensor::host(DType::f32, {3, 2});
  moe_unpermute_forward(cpu(), yp, example_map(), probs, y);
  EXPECT_FLOAT_EQ(y.at(0), 0.5f * 1 + 0.25f * 3);  // rows 0 and 2
  EXPECT_FLOAT_EQ(y.at(2), 0.75f * 4);             // row 3 only
  EXPECT_FLOAT_EQ(y.at(4), 1.0f * 2);              // row 1 only; padding row 4 nowhere
}

TEST(MoePermute, BackwardsAreTheAdjoints) {
  const MoeRowMap map = example_map();
  Tensor x = random_normal({3, 4}, 1), dxp = random_normal({5, 4}, 2);
  Tensor xp = Tensor::host(DType::f32, {5, 4}), dx = Tensor::host(DType::f32, {3, 4});
  moe_permute_forward(cpu(), x, map, xp);
  moe_permute_backward(cpu(), dxp, map, dx);
  EXPECT_NEAR(dot(xp, dxp), dot(x, dx), 1e-5);  // <P x, g> = <x, P^T g>

  Tensor yp = random_normal({5, 4}, 3), probs = random_uniform({3, 2}, 4, 0.1f, 1.0f), dy = random_normal({3, 4}, 5);
  Tensor y = Tensor::host(DType::f32, {3, 4}), dyp = Tensor::host(DType::f32, {5, 4});
  Tensor dprobs = Tensor::host(DType::f32, {3, 2});
  auto loss = [&] {
    moe_unpermute_forward(cpu(), yp, map, probs, y);
    return dot(y, dy);
  };
  moe_unpermute_backward(cpu(), dy, yp, map, probs, dyp, dprobs);
  expect_grad_close("dyp", loss, yp, dyp, 20, 1e-2f);
  expect_grad_close("dprobs", loss, probs, dprobs, 6, 1e-2f);
  EXPECT_EQ(dprobs.at(3), 0.0f);  // dropped choices get no gradient
  EXPECT_EQ(dyp.at(16), 0.0f);    // nor does the padding row
}

}  // namespace
}  // namespace troupe::test
