// CPU attention against a naive reference that materializes the T x T score matrix with an
// explicit (causal or sliding-window) mask, and its backward against finite differences.
#include <cmath>
#include <vector>

#include "kernels/attention.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct AttentionCase {
  int64_t B, T;
  int H, G, D;
  float scale = 0.0f;
  int window = 0;  // 0: unbounded
};

AttentionConfig config_of(const AttentionCase& c) { return {c.H, c.G, c.D, c.scale, c.window}; }
Shape qkv_shape(const AttentionCase& c) { return {c.B, c.T, int64_t(c.H + 2 * c.G) * c.D}; }
Shape out_shape(const AttentionCase& c) { return {c.B, c.T, int64_t(c.H) * c.D}; }

// Full masked score matrix per (b, h) in f64, softmax, then P V. Query i sees key j iff
// j <= i and, under a window W, i - W < j.
void naive_attention(const AttentionCase& c, const Tensor& qkv, const Tensor& out, const Tensor& lse) {
  const double scale = c.scale != 0.0f ? c.scale : 1.0 / std::sqrt(double(c.D));
  const int64_t width = qkv.dim(2);
  const float* x = qkv.data_as<float>();
  auto head = [&](int64_t b, int64_t t, int slot) { return x + (b * c.T + t) * width + int64_t(slot) * c.D; };
  std::vector<double> s(size_t(c.T * c.T));
  for (int64_t b = 0; b < c.B; ++b) {
    for (int h = 0; h < c.H; ++h) {
      const int g = h / (c.H / c.G);
      for (int64_t i = 0; i < c.T; ++i) {
        for (int64_t j = 0; j < c.T; ++j) {
          double d = 0;
          for (int k = 0; k < c.D; ++k) d += double(head(b, i, h)[k]) * head(b, j, c.H + g)[k];
          const bool visible = j <= i && (c.window == 0 || j > i - c.window);
          s[i * c.T + j] = visible ? d * scale : -INFINITY;
        }
      }
      for (int64_t i = 0; i < c.T; ++i) {
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < c.T; ++j) m = std::max(m, s[i * c.T + j]);
        for (int64_t j = 0; j < c.T; ++j) sum += std::exp(s[i * c.T + j] - m);
        lse.data_as<float>()[(b * c.H + h) * c.T + i] = float(m + std::log(sum));
        for (int k = 0; k < c.D; ++k) {
          double o = 0;
          for (int64_t j = 0; j < c.T; ++j) o += std::exp(s[i * c.T + j] - m) / sum * head(b, j, c.H + c.G + g)[k];
          out.data_as<float>()[(b * c.T + i) * c.H * c.D + int64_t(h) * c.D + k] = float(o);
        }
      }
    }
  }
}

class AttentionForward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionForward, MatchesNaiveReference) {
  const AttentionCase c = GetParam();
  Tensor qkv = random_normal(qkv_shape(c), 7, 1.5f);
  Tensor out = Tensor::host(DType::f32, out_shape(c)), lse = Tensor::host(DType::f32, {c.B, c.H, c.T});
  Tensor out_ref = Tensor::host(DType::f32, out_shape(c)), lse_ref = Tensor::host(DType::f32, {c.B, c.H, c.T});
  attention_forward(cpu(), qkv, config_of(c), out, lse);
  naive_attention(c, qkv, out_ref, lse_ref);
  EXPECT_LT(rel_error(out, out_ref), 1e-5);
  EXPECT_LT(max_abs_diff(lse, lse_ref), 1e-5);
}

// GQA (H=4, G=2), MHA, multi-query, odd T and D, a custom scale, a single token.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionForward,
                         ::testing::Values(AttentionCase{2, 13, 4, 2, 8}, AttentionCase{1, 13, 3, 3, 16},
                                           AttentionCase{2, 7, 4, 1, 5}, AttentionCase{1, 9, 2, 2, 8, 0.3f},
                                           AttentionCase{1, 1, 2, 1, 4}));
// Sliding windows: W = 1, W < T with GQA and MQA, W = T, W > T, a custom scale, one token.
INSTANTIATE_TEST_SUITE_P(
    Windows, AttentionForward,
    ::testing::Values(AttentionCase{2, 13, 4, 2, 8, 0.0f, 1}, AttentionCase{2, 13, 4, 2, 8, 0.0f, 4},
                      AttentionCase{1, 17, 6, 1, 5, 0.0f, 6}, AttentionCase{1, 13, 3, 3, 16, 0.0f, 13},
                      AttentionCase{2, 7, 4, 1, 5, 0.0f, 20}, AttentionCase{1, 9, 2, 2, 8, 0.3f, 3},
                      AttentionCase{1, 1, 2, 1, 4, 0.0f, 1}));

TEST(Attention, FirstTokenCopiesItsValue) {
  // Causality at its simplest: row 0 attends only to itself, so out = v_0 and lse = scaled q.k.
  const AttentionCase c{1, 4, 2, 1, 4};
  Tensor qkv = random_normal(qkv_shape(c), 3);
  Tensor out = Tensor::host(DType::f32, out_shape(c)), lse = Tensor::host(DType::f32, {1, 2, 4});
  attention_forward(cpu(), qkv, config_of(c), out, lse);
  const float* x = qkv.data_as<float>();
  for (int h = 0; h < 2; ++h) {
    double qk = 0;
    for (int k = 0; k < 4; ++k) {
      EXPECT_FLOAT_EQ(out.at(h * 4 + k), x[3 * 4 + k]) << "head " << h;  // value head at slot H + G = 3
      qk += double(x[h * 4 + k]) * x[2 * 4 + k];                         // key head at slot H = 2
    }
    EXPECT_NEAR(lse.at(h * 4), qk / 2.0, 1e-6);  // 1/sqrt(4)
  }
}

TEST(Attention, WindowOfOneCopiesEachValue) {
  // W = 1: every row attends only to itself, so out_t = v_t exactly and lse = scaled q_t.k_t.
  const AttentionCase c{2, 6, 2, 1, 4, 0.0f, 1};
  Tensor qkv = random_normal(qkv_shape(c), 5);
  Tensor out = Tensor::host(DType::f32, out_shape(c)), lse = Tensor::host(DType::f32, {c.B, c.H, c.T});
  attention_forward(cpu(), qkv, config_of(c), out, lse);
  const int64_t width = qkv.dim(2);
  for (int64_t bt = 0; bt < c.B * c.T; ++bt) {
    const float* token = qkv.data_as<float>() + bt * width;
    const float *key = token + c.H * c.D, *value = token + (c.H + c.G) * c.D;  // G = 1
    for (int h = 0; h < c.H; ++h) {
      double qk = 0;
      for (int k = 0; k < c.D; ++k) {
        EXPECT_EQ(out.at(bt * c.H * c.D + h * c.D + k), value[k]) << "token " << bt << " head " << h;
        qk += double(token[h * c.D + k]) * key[k];
      }
      const int64_t b = bt / c.T, t = bt % c.T;
      EXPECT_NEAR(lse.at((b * c.H + h) * c.T + t), qk / 2.0, 1e-6);  // scale 1/sqrt(4)
    }
  }
}

TEST(Attention, WindowAtLeastTIsUnboundedBitForBit) {
  const AttentionCase c{2, 11, 4, 2, 8};
  Tensor qkv = random_normal(qkv_shape(c), 9), dout = random_normal(out_shape(c), 10);
  auto run = [&](int window, Tensor& out, Tensor& lse, Tensor& dqkv) {
    AttentionConfig cfg = config_of(c);
    cfg.window = window;
    out = Tensor::host(DType::f32, out_shape(c));
    lse = Tensor::host(DType::f32, {c.B, c.H, c.T});
    dqkv = Tensor::host(DType::f32, qkv_shape(c));
    attention_forward(cpu(), qkv, cfg, out, lse);
    attention_backward(cpu(), dout, qkv, out, lse, cfg, dqkv);
  };
  Tensor out0, lse0, dqkv0;
  run(0, out0, lse0, dqkv0);
  for (int window : {int(c.T), int(c.T) + 1, 1000}) {
    Tensor out, lse, dqkv;
    run(window, out, lse, dqkv);
    EXPECT_EQ(max_abs_diff(out, out0), 0.0) << "window " << window;
    EXPECT_EQ(max_abs_diff(lse, lse0), 0.0) << "window " << window;
    EXPECT_EQ(max_abs_diff(dqkv, dqkv0), 0.0) << "window " << window;
  }
  // And a window below T does change the result (the comparison above can fail).
  Tensor out, lse, dqkv;
  run(int(c.T) - 1, out, lse, dqkv);
  EXPECT_GT(max_abs_diff(out, out0), 0.0);
}

class AttentionBackward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionBackward, MatchesFiniteDifferences) {
  const AttentionCase c = GetParam();
  Tensor qkv = random_normal(qkv_shape(c), 11);
  Tensor r = random_normal(out_shape(c), 12);
  Tensor out = Tensor::host(DType::f32, out_shape(c)), lse = Tensor::host(DType::f32, {c.B, c.H, c.T});
  auto loss = [&] {
    attention_forward(cpu(), qkv, config_of(c), out, lse);
    return dot(out, r);
  };
  loss();
  Tensor dqkv = Tensor::host(DType::f32, qkv_shape(c));
  attention_backward(cpu(), r, qkv, out, lse, config_of(c), dqkv);
  expect_grad_close("attention dqkv", loss, qkv, dqkv, 48);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBackward,
                         ::testing::Values(AttentionCase{1, 6, 4, 2, 4}, AttentionCase{2, 5, 2, 2, 3},
                                           AttentionCase{1, 7, 3, 1, 4, 0.7f}));
// W = 1 (only self), W < T with GQA and MQA, W = T.
INSTANTIATE_TEST_SUITE_P(Windows, AttentionBackward,
                         ::testing::Values(AttentionCase{2, 5, 2, 2, 3, 0.0f, 1}, AttentionCase{1, 9, 4, 2, 4, 0.0f, 3},
                                           AttentionCase{1, 9, 3, 1, 4, 0.7f, 4},
                                           AttentionCase{1, 6, 4, 2, 4, 0.0f, 6}));

TEST(Attention, BadArgumentsAreErrors) {
  Tensor qkv = Tensor::host(DType::f32, {1, 4, 3 * 8});
  Tensor out = Tensor::host(DType::f32, {1, 4, 8}), lse = Tensor::host(DType::f32, {1, 1, 4});
  EXPECT_NO_THROW(attention_forward(cpu(), qkv, {1, 1, 8}, out, lse));
  EXPECT_THROW(attention_forward(cpu(), qkv, {3, 2, 8}, out, lse), Error);  // G does not divide H
  EXPECT_THROW(attention_forward(cpu(), qkv, {1, 1, 4}, out, lse), Error);  // qkv width
  EXPECT_THROW(attention_forward(cpu(), qkv, {1, 1, 8}, lse, lse), Error);  // out shape
  Tensor lse_bf16 = Tensor::host(DType::bf16, {1, 1, 4});
  EXPECT_THROW(attention_forward(cpu(), qkv, {1, 1, 8}, out, lse_bf16), Error);
  EXPECT_THROW(attention_backward(cpu(), out, qkv, out, lse, {1, 1, 8}, qkv), Error);  // dqkv aliases qkv
  EXPECT_THROW(attention_forward(cpu(), qkv, {1, 1, 8, 0.0f, -1}, out, lse), Error);   // negative window
  Tensor dqkv = Tensor::host(DType::f32, {1, 4, 3 * 8});
  EXPECT_THROW(attention_backward(cpu(), out, qkv, out, lse, {1, 1, 8, 0.0f, -2}, dqkv), Error);
  EXPECT_NO_THROW(attention_forward(cpu(), qkv, {1, 1, 8, 0.0f, 2}, out, lse));
}

}  // namespace
}  // namespace troupe::test
