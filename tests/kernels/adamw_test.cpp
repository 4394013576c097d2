// CPU AdamW against steps computed by hand (torch.optim.AdamW's formulas, in f64).
#include <cmath>

#include "kernels/adamw.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct Buffers {
  Tensor master, m, v, grad, params;
  explicit Buffers(int64_t n)
      : master(Tensor::host(DType::f32, {n})),
        m(Tensor::host(DType::f32, {n})),
        v(Tensor::host(DType::f32, {n})),
        grad(Tensor::host(DType::f32, {n})),
        params(Tensor::host(DType::f32, {n})) {}
};

// One element of torch.optim.AdamW's step (decoupled decay first), in f64.
struct Element {
  double p, m, v;
};
Element reference_step(Element e, double g, const AdamWConfig& cfg, double wd, int64_t step) {
  e.p *= 1.0 - double(cfg.lr) * wd;
  e.m = double(cfg.beta1) * e.m + (1.0 - double(cfg.beta1)) * g;
  e.v = double(cfg.beta2) * e.v + (1.0 - double(cfg.beta2)) * g * g;
  const double step_size = double(cfg.lr) / (1.0 - std::pow(double(cfg.beta1), double(step)));
  const double denom = std::sqrt(e.v) / std::sqrt(1.0 - std::pow(double(cfg.beta2), double(step))) + double(cfg.eps);
  e.p -= step_size * e.m / denom;
  return e;
}

// Segments [0, 3) with decay and [4, 6) without; elements 3, 6 and 7 belong to none.
TEST(AdamW, MatchesHandComputedStepsAndSkipsGaps) {
  const int64_t n = 8;
  Buffers b(n);
  const std::vector<ParamSegment> segments = {{4, 2, false}, {0, 3, true}};
  const AdamWConfig cfg{0.05f, 0.9f, 0.95f, 1e-6f, 0.1f};
  for (int64_t i = 0; i < n; ++i) {
    b.master.at(i) = 0.5f - 0.3f * float(i);
    b.m.at(i) = 0.01f * float(i);  // as if earlier steps had run
    b.v.at(i) = 0.002f * float(i + 1);
    b.params.at(i) = -7.0f;
  }
  std::vector<Element> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = {b.master.at(i), b.m.at(i), b.v.at(i)};

  const float grad_scale = 0.5f;
  for (int64_t step = 3; step <= 5; ++step) {
    for (int64_t i = 0; i < n; ++i) b.grad.at(i) = std::sin(float(i + 3 * step));
    adamw_step(cpu(), b.master, b.m, b.v, b.grad, b.params, segments, cfg, step, grad_scale);
    for (int64_t i = 0; i < n; ++i) {
      const bool in_segment = i < 3 || i == 4 || i == 5;
      if (in_segment) ref[i] = reference_step(ref[i], double(b.grad.at(i)) * grad_scale, cfg, i < 3 ? 0.1 : 0.0, step);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const bool in_segment = i < 3 || i == 4 || i == 5;
    if (!in_segment) {  // untouched, bit for bit
      EXPECT_EQ(b.master.at(i), 0.5f - 0.3f * float(i)) << i;
      EXPECT_EQ(b.m.at(i), 0.01f * float(i)) << i;
      EXPECT_EQ(b.v.at(i), 0.002f * float(i + 1)) << i;
      EXPECT_EQ(b.params.at(i), -7.0f) << i;
      continue;
    }
    EXPECT_NEAR(b.master.at(i), ref[i].p, 2e-6 * std::max(1.0, std::fabs(ref[i].p))) << i;
    EXPECT_NEAR(b.m.at(i), ref[i].m, 1e-6) << i;
    EXPECT_NEAR(b.v.at(i), ref[i].v, 1e-7) << i;
    EXPECT_EQ(b.params.at(i), b.master.at(i)) << i;
  }
}

// With zero gradient and zero moments the Adam update is 0: only the decay moves a weight.
TEST(AdamW, NoDecaySegmentHasNoWeightDecay) {
  Buffers b(4);
  for (int64_t i = 0; i < 4; ++i) {
    b.master.at(i) = 2.0f;
    b.m.at(i) = b.v.at(i) = b.grad.at(i) = 0.0f;
  }
  const AdamWConfig cfg{0.1f, 0.9f, 0.999f, 1e-8f, 0.5f};
  adamw_step(cpu(), b.master, b.m, b.v, b.grad, Tensor(), {{0, 2, true}, {2, 2, false}}, cfg, 1, 1.0f);
  EXPECT_FLOAT_EQ(b.master.at(0), 2.0f * (1.0f - 0.1f * 0.5f));
  EXPECT_FLOAT_EQ(b.master.at(1), 2.0f * (1.0f - 0.1f * 0.5f));
  EXPECT_EQ(b.master.at(2), 2.0f);
  EXPECT_EQ(b.master.at(3), 2.0f);
}

// The first step of Adam moves every weight by about lr * sign(g), whatever |g| is.
TEST(AdamW, FirstStepIsLrTimesSignOfGradient) {
  Buffers b(3);
  const float g[3] = {1e-3f, -5.0f, 200.0f};
  for (int64_t i = 0; i < 3; ++i) {
    b.master.at(i) = 1.0f;
    b.m.at(i) = b.v.at(i) = 0.0f;
    b.grad.at(i) = g[i];
  }
  const AdamWConfig cfg{1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f};
  adamw_step(cpu(), b.master, b.m, b.v, b.grad, Tensor(), {{0, 3, true}}, cfg, 1, 1.0f);
  for (int64_t i = 0; i < 3; ++i) EXPECT_NEAR(b.master.at(i), 1.0f - 1e-2f * (g[i] > 0 ? 1.0f : -1.0f), 1e-5) << i;
}

TEST(AdamW, BadArgumentsAreErrors) {
  Buffers b(6);
  const AdamWConfig cfg;
  auto step = [&](std::vector<ParamSegment> segs, int64_t s = 1) {
    adamw_step(cpu(), b.master, b.m, b.v, b.grad, b.params, segs, cfg, s, 1.0f);
  };
  EXPECT_THROW(step({{0, 4, true}, {3, 2, true}}), Error);  // overlap
  EXPECT_THROW(step({{4, 3, true}}), Error);                // past the end
  EXPECT_THROW(step({{-1, 2, true}}), Error);
  EXPECT_THROW(step({{0, 2, true}}, 0), Error);  // steps count from 1
  EXPECT_THROW(adamw_step(cpu(), b.master, b.m, Tensor::host(DType::f32, {5}), b.grad, b.params, {}, cfg, 1, 1.0f),
               Error);
}

}  // namespace
}  // namespace troupe::test
