// CPU rotary embedding: known values, the inverse, and the gradient.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/rope.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

Tensor host_copy(const Tensor& x) {
  Tensor y = Tensor::host(DType::f32, x.shape());
  copy(cpu(), x, y);
  return y;
}

TEST(Rope, PositionZeroIsIdentityAndValuesAreUntouched) {
  const RopeConfig cfg{2, 1, 8};
  Tensor x = random_normal({2, 3, (2 + 2 * 1) * 8}, 1);
  Tensor y = host_copy(x);
  rope_apply(cpu(), y, cfg, false);
  const int64_t width = x.dim(2), v_begin = 3 * 8;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t k = 0; k < width; ++k) {
        const int64_t i = (b * 3 + t) * width + k;
        if (t == 0 || k >= v_begin) {
          EXPECT_EQ(y.at(i), x.at(i)) << "t=" << t << " k=" << k;
        } else if (k == 0) {
          EXPECT_NE(y.at(i), x.at(i)) << "t=" << t;  // the fastest pair does turn
        }
      }
    }
  }
}

TEST(Rope, HandComputedRotation) {
  // D = 4: pair (x0, x2) turns by p * 1, pair (x1, x3) by p * 10000^(-1/2) = p * 0.01.
  const RopeConfig cfg{1, 1, 4};
  Tensor x = Tensor::host_f32({1, 2, 12}, {0, 0, 0, 0, 0,  0,    0, 0, 0, 0, 0, 0,    // t = 0
                                           1, 2, 3, 4, -1, 0.5f, 2, 0, 9, 9, 9, 9});  // t = 1: q, k, v
  rope_apply(cpu(), x, cfg, false);
  auto turn = [](double a, double b, double angle) {
    return std::pair{a * std::cos(angle) - b * std::sin(angle), b * std::cos(angle) + a * std::sin(angle)};
  };
  const double expected[8] = {turn(1, 3, 1).first,     turn(2, 4, 0.01).first,   turn(1, 3, 1).second,
                              turn(2, 4, 0.01).second, turn(-1, 2, 1).first,     turn(0.5, 0, 0.01).first,
                              turn(-1, 2, 1).second,   turn(0.5, 0, 0.01).second};
  for (int k = 0; k < 8; ++k) EXPECT_NEAR(x.at(12 + k), expected[k], 2e-6) << "k=" << k;
  for (int k = 8; k < 12; ++k) EXPECT_EQ(x.at(12 + k), 9.0f);
}

// transformers' _compute_llama3_parameters, step by step (in double): the frequencies whose
// wavelength is below original/high_freq_factor stay, those above original/low_freq_factor are
// divided by the factor, the band between is interpolated.
std::vector<double> llama3_reference(int D, double base, double factor, double low, double high, double original) {
  std::vector<double> out;
  for (int i = 0; i < D / 2; ++i) {
    const double inv_freq = 1.0 / std::pow(base, double(2 * i) / D);
    const double wavelen = 2 * M_PI / inv_freq;
    double f = wavelen > original / low ? inv_freq / factor : inv_freq;
    const double smooth = (original / wavelen - low) / (high - low);
    const bool medium = !(wavelen < original / high) && !(wavelen > original / low);
    if (medium) f = (1 - smooth) * f / factor + smooth * f;
    out.push_back(f);
  }
  return out;
}

TEST(Rope, Llama3ScalingMatchesTransformersFormula) {
  const RopeScaling s{true, 8.0f, 1.0f, 4.0f, 8192.0f};
  const int D = 128;
  const std::vector<double> ref = llama3_reference(D, 500000.0, 8, 1, 4, 8192);
  int kept = 0, divided = 0, smoothed = 0;
  for (int i = 0; i < D / 2; ++i) {
    const double plain = 1.0 / std::pow(500000.0, double(2 * i) / D);
    const double got = rope_inv_freq(i, D, 500000.0f, s);
    EXPECT_NEAR(got / ref[size_t(i)], 1.0, 2e-6) << "i=" << i;
    if (std::abs(ref[size_t(i)] / plain - 1) < 1e-9)
      ++kept;
    else if (std::abs(ref[size_t(i)] * 8 / plain - 1) < 1e-9)
      ++divided;
    else
      ++smoothed;
    EXPECT_NEAR(rope_inv_freq(i, D, 500000.0f, RopeScaling{}) / plain, 1.0, 2e-6) << "off: unchanged, i=" << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0) << "the test must cover all three bands";

  // The kernel turns each pair by position * that frequency.
  RopeConfig cfg{1, 1, D, 500000.0f, 3000, s};
  Tensor x = random_normal({1, 1, 3 * D}, 5);
  Tensor y = host_copy(x);
  rope_apply(cpu(), y, cfg, false);
  for (int i = 0; i < D / 2; ++i) {
    const double angle = 3000 * ref[size_t(i)];
    const double a = x.at(i), b = x.at(i + D / 2);
    EXPECT_NEAR(y.at(i), a * std::cos(angle) - b * std::sin(angle), 2e-3) << "i=" << i;
    EXPECT_NEAR(y.at(i + D / 2), b * std::cos(angle) + a * std::sin(angle), 2e-3) << "i=" << i;
  }
}

TEST(Rope, InverseUndoesForward) {
  const RopeConfig cfg{4, 2, 16, 10000.0f, 3};
  Tensor x = random_normal({2, 5, 8 * 16}, 2);
  Tensor y = host_copy(x);
  rope_apply(cpu(), y, cfg, false);
  EXPECT_GT(max_abs_diff(y, x), 0.1);
  rope_apply(cpu(), y, cfg, true);
  EXPECT_LT(max_abs_diff(y, x), 1e-5);
}

TEST(Rope, PosOffsetShiftsPositions) {
  // Token 3 of a sequence equals a lone token at pos_offset 3 (decoding with a KV cache).
  const RopeConfig cfg{2, 2, 8, 500.0f};
  Tensor x = random_normal({1, 4, 6 * 8}, 3);
  Tensor lone = Tensor::host(DType::f32, {1, 1, 6 * 8});
  for (int64_t k = 0; k < 6 * 8; ++k) lone.at(k) = x.at(3 * 6 * 8 + k);
  rope_apply(cpu(), x, cfg, false);
  RopeConfig shifted = cfg;
  shifted.pos_offset = 3;
  rope_apply(cpu(), lone, shifted, false);
  for (int64_t k = 0; k < 6 * 8; ++k) EXPECT_FLOAT_EQ(lone.at(k), x.at(3 * 6 * 8 + k)) << "k=" << k;
}

TEST(Rope, PerTokenPositionsMatchTheirOwnOffsets) {
  // rope_apply_at over a flattened batch: each token turns as a lone token at its position.
  const RopeConfig cfg{2, 1, 8, 1000.0f};
  const int64_t width = 4 * 8;
  const std::vector<int32_t> pos{5, 0, 1, 17, 2};
  Tensor x = random_normal({1, 5, width}, 6);
  Tensor y = host_copy(x);
  Tensor positions = Tensor::host(DType::i32, {5});
  std::copy(pos.begin(), pos.end(), positions.data_as<int32_t>());
  rope_apply_at(cpu(), y, positions, cfg, false);
  for (int64_t t = 0; t < 5; ++t) {
    Tensor lone = Tensor::host(DType::f32, {1, 1, width});
    std::copy_n(x.data_as<float>() + t * width, width, lone.data_as<float>());
    RopeConfig at = cfg;
    at.pos_offset = pos[size_t(t)];
    rope_apply(cpu(), lone, at, false);
    for (int64_t k = 0; k < width; ++k) EXPECT_EQ(lone.at(k), y.at(t * width + k)) << "t=" << t << " k=" << k;
  }
  positions.data_as<int32_t>()[2] = -1;
  EXPECT_THROW(rope_apply_at(cpu(), y, positions, cfg, false), Error);
  EXPECT_THROW(rope_apply_at(cpu(), y, positions.slice(0, {4}), cfg, false), Error);
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const RopeConfig cfg{2, 1, 6, 100.0f, 1};
  Tensor x = random_normal({2, 3, 4 * 6}, 4);
  Tensor r = random_normal(x.shape(), 5);
  Tensor y = Tensor::host(DType::f32, x.shape());
  auto loss = [&] {
    copy(cpu(), x, y);
    rope_apply(cpu(), y, cfg, false);
    return dot(y, r);
  };
  Tensor dx = host_copy(r);
  rope_apply(cpu(), dx, cfg, true);
  expect_grad_close("rope dx", loss, x, dx);
}

TEST(Rope, BadArgumentsAreErrors) {
  Tensor x = Tensor::host(DType::f32, {1, 2, 4 * 6});
  EXPECT_NO_THROW(rope_apply(cpu(), x, {2, 1, 6}, false));
  EXPECT_THROW(rope_apply(cpu(), x, {2, 1, 5}, false), Error);  // odd head_dim (and wrong width)
  EXPECT_THROW(rope_apply(cpu(), x, {1, 1, 6}, false), Error);  // width
  EXPECT_THROW(rope_apply(cpu(), x, {2, 1, 6, -1.0f}, false), Error);
}

}  // namespace
}  // namespace troupe::test
