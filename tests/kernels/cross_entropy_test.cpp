// CPU cross-entropy: known values, padded vocabulary, ignored rows, finite differences.
#include <cmath>

#include "kernels/cross_entropy.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

Tensor targets_of(const std::vector<int32_t>& values) {
  Tensor t = Tensor::host(DType::i32, {int64_t(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data_as<int32_t>()[i] = values[i];
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor out = Tensor::host(t.dtype(), t.shape());
  copy(cpu(), t, out);
  return out;
}

// Vp = 6 columns, V = 4 real ones: the padding holds huge values that must not count.
TEST(CrossEntropy, KnownValuesIgnorePaddingAndIgnoredRows) {
  Tensor logits = Tensor::host_f32({3, 6}, {0, 0, 0, 0, 50, 50,              //
                                            1000, 1000, -1000, -1000, 9, 9,  // no overflow: max subtracted
                                            1, 2, 3, 4, 5, 6});              // ignored row
  Tensor targets = targets_of({2, 0, -1});
  Tensor losses = Tensor::host(DType::f32, {3});
  cross_entropy_forward(cpu(), logits, targets, 4, losses);
  EXPECT_NEAR(losses.at(0), std::log(4.0), 1e-6);
  EXPECT_NEAR(losses.at(1), std::log(2.0), 1e-5);
  EXPECT_EQ(losses.at(2), 0.0f);

  const float scale = 0.5f;
  cross_entropy_forward_backward(cpu(), logits, targets, 4, scale, losses);
  EXPECT_NEAR(losses.at(0), std::log(4.0), 1e-6);
  const float expected[3][6] = {{0.25f * scale, 0.25f * scale, -0.75f * scale, 0.25f * scale, 0, 0},
                                {-0.5f * scale, 0.5f * scale, 0, 0, 0, 0},
                                {0, 0, 0, 0, 0, 0}};
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 6; ++j) EXPECT_NEAR(logits.at(r * 6 + j), expected[r][j], 1e-7) << r << "," << j;
}

TEST(CrossEntropy, FusedGradientMatchesFiniteDifferences) {
  const int64_t padded_vocab = 10, vocab = 7;
  const float grad_scale = 0.5f;
  Tensor x = random_normal({4, padded_vocab}, 11, 2.0f);
  Tensor targets = targets_of({1, -1, 6, 0});
  Tensor losses = Tensor::host(DType::f32, {4});
  auto loss = [&] {
    cross_entropy_forward(cpu(), x, targets, vocab, losses);
    double sum = 0;
    for (int i = 0; i < 4; ++i) sum += losses.at(i);
    return sum * grad_scale;
  };
  Tensor dx = copy_of(x);
  cross_entropy_forward_backward(cpu(), dx, targets, vocab, grad_scale, losses);
  expect_grad_close("cross_entropy dlogits", loss, x, dx, 40);
  for (int64_t j = vocab; j < padded_vocab; ++j) EXPECT_EQ(dx.at(j), 0.0f) << "padding column " << j;
}

TEST(CrossEntropy, ForwardLeavesLogitsAndMatchesFusedLosses) {
  Tensor x = random_normal({5, 16}, 12, 3.0f);
  Tensor before = copy_of(x);
  Tensor targets = targets_of({0, 15, 7, -1, 3});
  Tensor fwd = Tensor::host(DType::f32, {5}), fused = Tensor::host(DType::f32, {5});
  cross_entropy_forward(cpu(), x, targets, 16, fwd);
  EXPECT_EQ(max_abs_diff(x, before), 0.0);
  cross_entropy_forward_backward(cpu(), x, targets, 16, 1.0f, fused);
  EXPECT_EQ(max_abs_diff(fwd, fused), 0.0);
}

TEST(CrossEntropy, BadArgumentsAreErrors) {
  Tensor x = Tensor::host(DType::f32, {2, 8});
  Tensor losses = Tensor::host(DType::f32, {2});
  EXPECT_THROW(cross_entropy_forward(cpu(), x, targets_of({0, 6}), 6, losses), Error);   // target in the padding
  EXPECT_THROW(cross_entropy_forward(cpu(), x, targets_of({0, -2}), 6, losses), Error);  // only -1 is "ignored"
  EXPECT_THROW(cross_entropy_forward(cpu(), x, targets_of({0, 1}), 9, losses), Error);   // V > Vp
  EXPECT_THROW(cross_entropy_forward(cpu(), x, targets_of({0, 1, 2}), 6, losses), Error);
  EXPECT_THROW(cross_entropy_forward(cpu(), x, targets_of({0, 1}), 6, Tensor::host(DType::f32, {3})), Error);
}

}  // namespace
}  // namespace troupe::test
