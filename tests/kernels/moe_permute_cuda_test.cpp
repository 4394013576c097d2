// CUDA MoE permute / unpermute against the CPU backend, in bf16, f16 and f32, on a random
// routing with dropped choices and padding rows.
#include <algorithm>
#include <numeric>
#include <random>

#include "kernels/moe_permute.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// N tokens, top-K over E experts, about one choice in five dropped, two padding rows per expert.
MoeRowMap random_map(int64_t n, int k, int e) {
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> per_expert(static_cast<size_t>(e));
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> experts(static_cast<size_t>(e));
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int c = 0; c < k; ++c)
      if (rng() % 5 != 0) per_expert[size_t(experts[size_t(c)])].push_back(int32_t(t * k + c));
  }
  std::vector<int32_t> rows;
  for (auto& list : per_expert) {
    rows.insert(rows.end(), list.begin(), list.end());
    rows.insert(rows.end(), {-1, -1});
  }
  Tensor row_choice = Tensor::host(DType::i32, {int64_t(rows.size())}), choice_row = Tensor::host(DType::i32, {n, k});
  std::fill(choice_row.data_as<int32_t>(), choice_row.data_as<int32_t>() + n * k, -1);
  for (size_t r = 0; r < rows.size(); ++r) {
    row_choice.data_as<int32_t>()[r] = rows[r];
    if (rows[r] >= 0) choice_row.data_as<int32_t>()[rows[r]] = int32_t(r);
  }
  return {row_choice, choice_row};
}

class MoePermuteCuda : public ::testing::TestWithParam<DType> {};

TEST_P(MoePermuteCuda, MatchesCpu) {
  const DType t = GetParam();
  const int64_t n = 96, c = 256;
  const MoeRowMap map = random_map(n, 2, 8);
  const int64_t rows = map.row_choice.dim(0);
  Tensor x = round_through(random_normal({n, c}, 1), t), dxp = round_through(random_normal({rows, c}, 2), t);
  Tensor yp = round_through(random_normal({rows, c}, 3), t), dy = round_through(random_normal({n, c}, 4), t);
  Tensor probs = random_uniform({n, 2}, 5, 0.0f, 1.0f);
  Tensor xp = Tensor::host(DType::f32, {rows, c}), dx = Tensor::host(DType::f32, {n, c});
  Tensor y = Tensor::host(DType::f32, {n, c}), dyp = Tensor::host(DType::f32, {rows, c});
  Tensor dprobs = Tensor::host(DType::f32, {n, 2});
  moe_permute_forward(cpu(), x, map, xp);
  moe_permute_backward(cpu(), dxp, map, dx);
  moe_unpermute_forward(cpu(), yp, map, probs, y);
  moe_unpermute_backward(cpu(), dy, yp, map, probs, dyp, dprobs);

  const MoeRowMap dmap{to_device(gpu(), map.row_choice, DType::i32), to_device(gpu(), map.choice_row, DType::i32)};
  Tensor xd = to_device(gpu(), x, t), dxpd = to_device(gpu(), dxp, t), ypd = to_device(gpu(), yp, t);
  Tensor dyd = to_device(gpu(), dy, t), pd = to_device(gpu(), probs, DType::f32);
  Tensor xpd = Tensor::empty(gpu(), t, {rows, c}), dxd = Tensor::empty(gpu(), t, {n, c});
  Tensor yd = Tensor::empty(gpu(), t, {n, c}), dypd = Tensor::empty(gpu(), t, {rows, c});
  Tensor dpd = Tensor::empty(gpu(), DType::f32, {n, 2});
  moe_permute_forward(gpu(), xd, dmap, xpd);
  moe_permute_backward(gpu(), dxpd, dmap, dxd);
  moe_unpermute_forward(gpu(), ypd, dmap, pd, yd);
  moe_unpermute_backward(gpu(), dyd, ypd, dmap, pd, dypd, dpd);
  const double tol = t == DType::f32 ? 1e-6 : 1e-2;
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), xpd), xp), 0.0);  // a copy: exact
  EXPECT_LT(rel_error(to_host_f32(gpu(), dxd), dx), tol);
  EXPECT_LT(rel_error(to_host_f32(gpu(), yd), y), tol);
  EXPECT_LT(rel_error(to_host_f32(gpu(), dypd), dyp), tol);
  EXPECT_LT(rel_error(to_host_f32(gpu(), dpd), dprobs), t == DType::f32 ? 1e-5 : 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Types, MoePermuteCuda, ::testing::Values(DType::bf16, DType::f16, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace troupe::test
