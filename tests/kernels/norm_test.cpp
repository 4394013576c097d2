// CPU LayerNorm / RMSNorm against hand-computed values and finite differences; the per-head
// RMSNorm (q/k norms inside a fused activation) against the plain one and finite differences.
#include <cmath>
#include <string>

#include "kernels/fp8.hpp"
#include "kernels/norm.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

constexpr float kEps = 1e-5f;

Tensor host_zeros(const Shape& shape) {
  Tensor t = Tensor::host(DType::f32, shape);
  fill_zero(cpu(), t);
  return t;
}

Tensor host_copy(const Tensor& t) {
  Tensor out = Tensor::host(t.dtype(), t.shape());
  copy(cpu(), t, out);
  return out;
}

// Runs f and expects a troupe::Error whose message contains `text`.
void expect_error_mentions(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Norm, LayerNormKnownValues) {
  Tensor x = Tensor::host_f32({2, 4}, {1, 2, 3, 4, -2, 0, 0, 2});
  Tensor w = Tensor::host_f32({4}, {1, 2, 1, 0.5f}), b = Tensor::host_f32({4}, {0, 1, -1, 0});
  Tensor y = Tensor::host(DType::f32, {2, 4}), mean = Tensor::host(DType::f32, {2}),
         rstd = Tensor::host(DType::f32, {2});
  layernorm_forward(cpu(), x, w, b, 0.0f, y, mean, rstd);
  // Row 0: mean 2.5, biased variance 1.25. Row 1: mean 0, variance 2.
  const double r0 = 1.0 / std::sqrt(1.25), r1 = 1.0 / std::sqrt(2.0);
  EXPECT_NEAR(mean.at(0), 2.5, 1e-6);
  EXPECT_NEAR(mean.at(1), 0.0, 1e-6);
  EXPECT_NEAR(rstd.at(0), r0, 1e-6);
  EXPECT_NEAR(rstd.at(1), r1, 1e-6);
  const double expected[8] = {-1.5 * r0,    -0.5 * r0 * 2 + 1,
                              0.5 * r0 - 1, 1.5 * r0 * 0.5,  // xhat * w + b
                              -2 * r1,      1,
                              -1,           2 * r1 * 0.5};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y.at(i), expected[i], 1e-6) << "y[" << i << "]";
}

TEST(Norm, RmsNormKnownValues) {
  Tensor x = Tensor::host_f32({2, 4}, {3, 4, 0, 0, 1, 1, 1, 1});
  Tensor w = Tensor::host_f32({4}, {1, 2, 3, 4});
  Tensor y = Tensor::host(DType::f32, {2, 4}), rstd = Tensor::host(DType::f32, {2});
  rmsnorm_forward(cpu(), x, w, 0.0f, y, rstd);
  // Row 0: mean(x^2) = 25/4, rstd = 0.4. Row 1: rstd = 1.
  EXPECT_NEAR(rstd.at(0), 0.4, 1e-6);
  EXPECT_NEAR(rstd.at(1), 1.0, 1e-6);
  const double expected[8] = {1.2, 3.2, 0, 0, 1, 2, 3, 4};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y.at(i), expected[i], 1e-6) << "y[" << i << "]";
}

// A large common offset must not cost precision (variance about the mean, in f64).
TEST(Norm, LayerNormIsShiftInvariant) {
  Tensor x = random_normal({4, 64}, 1);
  Tensor shifted = host_copy(x);
  for (int64_t i = 0; i < shifted.numel(); ++i) shifted.at(i) += 1000.0f;
  Tensor w = random_uniform({64}, 2, 0.5f, 1.5f), b = random_normal({64}, 3);
  Tensor y = Tensor::host(DType::f32, x.shape()), y_shifted = Tensor::host(DType::f32, x.shape());
  Tensor mean = Tensor::host(DType::f32, {4}), rstd = Tensor::host(DType::f32, {4});
  layernorm_forward(cpu(), x, w, b, kEps, y, mean, rstd);
  layernorm_forward(cpu(), shifted, w, b, kEps, y_shifted, mean, rstd);
  EXPECT_LT(rel_error(y_shifted, y), 1e-3);  // f32 spacing at 1000 is 6e-5
}

void check_layernorm_grads(bool with_bias) {
  const int64_t n = 3, c = 40;
  Tensor x = random_normal({n, c}, 1, 2.0f), w = random_normal({c}, 2);
  Tensor b = with_bias ? random_normal({c}, 3) : Tensor();
  Tensor r = random_normal({n, c}, 4);  // loss = sum(y * r), so dy = r
  Tensor y = Tensor::host(DType::f32, {n, c}), mean = Tensor::host(DType::f32, {n}),
         rstd = Tensor::host(DType::f32, {n});
  auto loss = [&] {
    layernorm_forward(cpu(), x, w, b, kEps, y, mean, rstd);
    return dot(y, r);
  };
  loss();  // mean, rstd at the unperturbed x
  Tensor dx = host_zeros({n, c}), dw = host_zeros({c}), db = with_bias ? host_zeros({c}) : Tensor();
  layernorm_backward(cpu(), r, x, w, mean, rstd, dx, dw, db);
  expect_grad_close("layernorm dx", loss, x, dx);
  expect_grad_close("layernorm dw", loss, w, dw);
  if (with_bias) expect_grad_close("layernorm db", loss, b, db);
}

TEST(Norm, LayerNormBackwardMatchesFiniteDifferences) { check_layernorm_grads(true); }
TEST(Norm, LayerNormWithoutBiasBackwardMatchesFiniteDifferences) { check_layernorm_grads(false); }

TEST(Norm, RmsNormBackwardMatchesFiniteDifferences) {
  const int64_t n = 3, c = 40;
  Tensor x = random_normal({n, c}, 5, 2.0f), w = random_normal({c}, 6), r = random_normal({n, c}, 7);
  Tensor y = Tensor::host(DType::f32, {n, c}), rstd = Tensor::host(DType::f32, {n});
  auto loss = [&] {
    rmsnorm_forward(cpu(), x, w, kEps, y, rstd);
    return dot(y, r);
  };
  loss();
  Tensor dx = host_zeros({n, c}), dw = host_zeros({c});
  rmsnorm_backward(cpu(), r, x, w, rstd, dx, dw);
  expect_grad_close("rmsnorm dx", loss, x, dx);
  expect_grad_close("rmsnorm dw", loss, w, dw);
}

// Backward adds into dx, dw and db: pre-filled values survive, plus the fresh gradient.
TEST(Norm, BackwardAccumulates) {
  const int64_t n = 5, c = 24;
  Tensor x = random_normal({n, c}, 8), w = random_normal({c}, 9), b = random_normal({c}, 10);
  Tensor dy = random_normal({n, c}, 11);
  Tensor y = Tensor::host(DType::f32, {n, c}), mean = Tensor::host(DType::f32, {n}),
         rstd = Tensor::host(DType::f32, {n});
  layernorm_forward(cpu(), x, w, b, kEps, y, mean, rstd);
  Tensor dx0 = host_zeros({n, c}), dw0 = host_zeros({c}), db0 = host_zeros({c});
  layernorm_backward(cpu(), dy, x, w, mean, rstd, dx0, dw0, db0);
  Tensor pre_dx = random_normal({n, c}, 12), pre_dw = random_normal({c}, 13), pre_db = random_normal({c}, 14);
  Tensor dx = host_copy(pre_dx), dw = host_copy(pre_dw), db = host_copy(pre_db);
  layernorm_backward(cpu(), dy, x, w, mean, rstd, dx, dw, db);
  for (int64_t i = 0; i < dx.numel(); ++i) EXPECT_NEAR(dx.at(i), pre_dx.at(i) + dx0.at(i), 1e-5) << "dx[" << i << "]";
  for (int64_t j = 0; j < c; ++j) {
    EXPECT_NEAR(dw.at(j), pre_dw.at(j) + dw0.at(j), 1e-5) << "dw[" << j << "]";
    EXPECT_NEAR(db.at(j), pre_db.at(j) + db0.at(j), 1e-5) << "db[" << j << "]";
  }

  rmsnorm_forward(cpu(), x, w, kEps, y, rstd);
  fill_zero(cpu(), dx0);
  fill_zero(cpu(), dw0);
  rmsnorm_backward(cpu(), dy, x, w, rstd, dx0, dw0);
  dx = host_copy(pre_dx);
  dw = host_copy(pre_dw);
  rmsnorm_backward(cpu(), dy, x, w, rstd, dx, dw);
  for (int64_t i = 0; i < dx.numel(); ++i) EXPECT_NEAR(dx.at(i), pre_dx.at(i) + dx0.at(i), 1e-5) << "dx[" << i << "]";
  for (int64_t j = 0; j < c; ++j) EXPECT_NEAR(dw.at(j), pre_dw.at(j) + dw0.at(j), 1e-5) << "dw[" << j << "]";
}

// With dx_in the input gradient goes to dx added to dx_in, bit for bit what adding in place gives,
// and dx_in is left as it was (zero-bubble's B keeps it for W: model/gpt_chunk_split_backward.cpp).
TEST(Norm, BackwardAddsToAnotherResidualGradient) {
  const int64_t n = 5, c = 24;
  Tensor x = random_normal({n, c}, 8), w = random_normal({c}, 9), b = random_normal({c}, 10);
  Tensor dy = random_normal({n, c}, 11), pre = random_normal({n, c}, 12);
  Tensor y = Tensor::host(DType::f32, {n, c}), mean = Tensor::host(DType::f32, {n}),
         rstd = Tensor::host(DType::f32, {n});
  for (const bool layernorm : {true, false}) {
    const char* what = layernorm ? "layernorm" : "rmsnorm";
    if (layernorm)
      layernorm_forward(cpu(), x, w, b, kEps, y, mean, rstd);
    else
      rmsnorm_forward(cpu(), x, w, kEps, y, rstd);
    Tensor in_place = host_copy(pre), dx_in = host_copy(pre), out = random_normal({n, c}, 13);
    Tensor dw0 = host_zeros({c}), db0 = host_zeros({c}), dw1 = host_zeros({c}), db1 = host_zeros({c});
    if (layernorm) {
      layernorm_backward(cpu(), dy, x, w, mean, rstd, in_place, dw0, db0);
      layernorm_backward(cpu(), dy, x, w, mean, rstd, out, dw1, db1, dx_in);
    } else {
      rmsnorm_backward(cpu(), dy, x, w, rstd, in_place, dw0);
      rmsnorm_backward(cpu(), dy, x, w, rstd, out, dw1, dx_in);
    }
    EXPECT_EQ(max_abs_diff(out, in_place), 0.0) << what << ": dx";
    EXPECT_EQ(max_abs_diff(dx_in, pre), 0.0) << what << ": dx_in must be left as it was";
    EXPECT_EQ(max_abs_diff(dw1, dw0), 0.0) << what << ": dw";
    EXPECT_EQ(max_abs_diff(db1, db0), 0.0) << what << ": db";
  }
  expect_error_mentions(
      [&] {
        rmsnorm_backward(cpu(), dy, x, w, rstd, host_zeros({n, c}), host_zeros({c}), host_zeros({n, c + 1}));
      },
      "'dx_in'");
}

// Per-head RMSNorm inside fused rows: rows of W columns holding heads of D values (a fused
// [q heads | k heads | v heads] activation), heads [first, first + count) normalized.
struct HeadCase {
  int64_t n = 5, d = 16, first = 3, count = 2;
  int64_t wx = 6 * 16 + 8;  // x's width: more heads than the span, and columns past the last head
  int64_t wy = 7 * 16;      // y's (dy's, dx's) width
};

// The span's heads of t [N, W] as contiguous rows [N * count, D].
Tensor gather_heads(const Tensor& t, const HeadCase& h) {
  Tensor out = Tensor::host(DType::f32, {h.n * h.count, h.d});
  for (int64_t r = 0; r < h.n; ++r)
    for (int64_t k = 0; k < h.count; ++k)
      for (int64_t j = 0; j < h.d; ++j)
        out.at((r * h.count + k) * h.d + j) = t.at(r * t.dim(1) + (h.first + k) * h.d + j);
  return out;
}

// Whether column `col` of a row lies in the span's heads.
bool in_span(int64_t col, const HeadCase& h) { return col >= h.first * h.d && col < (h.first + h.count) * h.d; }

TEST(HeadNorm, ForwardIsRmsNormOfEachHeadOtherColumnsUntouched) {
  const HeadCase h;
  Tensor x = random_normal({h.n, h.wx}, 21, 2.0f), w = random_normal({h.d}, 22);
  Tensor y = random_normal({h.n, h.wy}, 23), y0 = host_copy(y), rstd = Tensor::host(DType::f32, {h.n, h.count});
  rmsnorm_heads_forward(cpu(), x, w, kEps, {h.first, h.count}, y, rstd);
  // Reference: the plain RMSNorm of the heads laid out as rows of their own.
  Tensor ref = Tensor::host(DType::f32, {h.n * h.count, h.d}), ref_rstd = Tensor::host(DType::f32, {h.n * h.count});
  rmsnorm_forward(cpu(), gather_heads(x, h), w, kEps, ref, ref_rstd);
  EXPECT_LT(max_abs_diff(gather_heads(y, h), ref), 1e-6);
  EXPECT_LT(max_abs_diff(rstd, ref_rstd), 1e-6);
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (!in_span(i % h.wy, h)) {
      ASSERT_EQ(y.at(i), y0.at(i)) << "y[" << i << "] outside the heads was written";
    }
  }
  // In place (y = x) gives the same heads.
  Tensor inplace = host_copy(x);
  rmsnorm_heads_forward(cpu(), inplace, w, kEps, {h.first, h.count}, inplace, rstd);
  EXPECT_EQ(max_abs_diff(gather_heads(inplace, h), ref), 0.0);
}

TEST(HeadNorm, BackwardMatchesFiniteDifferences) {
  const HeadCase h;
  Tensor x = random_normal({h.n, h.wx}, 24, 2.0f), w = random_normal({h.d}, 25);
  Tensor r = random_normal({h.n, h.wy}, 26);  // loss = sum over the heads of y * r: dy = r there
  for (int64_t i = 0; i < r.numel(); ++i)
    if (!in_span(i % h.wy, h)) r.at(i) = 0.0f;
  Tensor y = host_zeros({h.n, h.wy}), rstd = Tensor::host(DType::f32, {h.n, h.count});
  auto loss = [&] {
    rmsnorm_heads_forward(cpu(), x, w, kEps, {h.first, h.count}, y, rstd);
    return dot(y, r);
  };
  loss();
  Tensor dx = random_normal({h.n, h.wy}, 27), dx_before = host_copy(dx);
  Tensor dw0 = random_normal({h.d}, 28), dw = host_copy(dw0);
  rmsnorm_heads_backward(cpu(), r, x, w, rstd, {h.first, h.count}, dx, dw);
  // dx's heads are overwritten (not added to), the rest of it untouched; seen as x's shape for
  // the finite differences (zero outside the heads, where x does not reach the loss).
  Tensor dx_as_x = host_zeros({h.n, h.wx});
  for (int64_t row = 0; row < h.n; ++row)
    for (int64_t col = 0; col < h.wy; ++col) {
      const int64_t i = row * h.wy + col;
      if (in_span(col, h)) {
        dx_as_x.at(row * h.wx + col) = dx.at(i);
      } else {
        ASSERT_EQ(dx.at(i), dx_before.at(i)) << "dx[" << i << "] outside the heads was written";
      }
    }
  expect_grad_close("head rmsnorm dx", loss, x, dx_as_x, 48);
  Tensor dw_increment = Tensor::host(DType::f32, {h.d});
  for (int64_t j = 0; j < h.d; ++j) dw_increment.at(j) = dw.at(j) - dw0.at(j);  // dw accumulates
  expect_grad_close("head rmsnorm dw", loss, w, dw_increment);

  // In place on dy gives the same dx.
  Tensor dy_inplace = host_copy(r), dw2 = host_zeros({h.d});
  rmsnorm_heads_backward(cpu(), dy_inplace, x, w, rstd, {h.first, h.count}, dy_inplace, dw2);
  EXPECT_EQ(max_abs_diff(gather_heads(dy_inplace, h), gather_heads(dx, h)), 0.0);
  for (int64_t j = 0; j < h.d; ++j) EXPECT_NEAR(dw2.at(j), dw_increment.at(j), 1e-5) << "dw[" << j << "]";
}

TEST(HeadNorm, BadArgumentsAreErrorsNamingTheArgument) {
  Tensor x = Tensor::host(DType::f32, {4, 40}), w = Tensor::host(DType::f32, {8}),
         rstd = Tensor::host(DType::f32, {4, 2});
  Tensor dw = Tensor::host(DType::f32, {8});
  expect_error_mentions([&] { rmsnorm_heads_forward(cpu(), x, w, kEps, {4, 2}, x, rstd); }, "heads [4, 6)");
  expect_error_mentions([&] { rmsnorm_heads_forward(cpu(), x, w, kEps, {0, 0}, x, rstd); }, "non-empty");
  expect_error_mentions(
      [&] {
        rmsnorm_heads_forward(cpu(), x, w, kEps, {0, 2}, x, Tensor::host(DType::f32, {4, 3}));
      },
      "'rstd'");
  expect_error_mentions(
      [&] {
        rmsnorm_heads_forward(cpu(), x, w, kEps, {0, 2}, Tensor::host(DType::f32, {3, 40}), rstd);
      },
      "'y'");
  expect_error_mentions(
      [&] {
        rmsnorm_heads_backward(cpu(), x, x, w, rstd, {0, 2}, Tensor::host(DType::f32, {4, 32}), dw);
      },
      "'dx'");
  expect_error_mentions([&] { rmsnorm_heads_backward(cpu(), x, x, w, rstd, {0, 2}, x, dw); }, "dx must not be x");
}

// The FP8 side output (the input cast of the FP8 linear a norm feeds) is the e4m3 cast of y and
// its amax, as fp8_cast and fp8_amax give them after the norm; y itself is unchanged.
TEST(Norm, Fp8OutputIsTheCastOfTheOutput) {
  const Tensor x = random_normal({6, 16}, 41, 2.0f), w = random_normal({16}, 42), b = random_normal({16}, 43);
  const Tensor scale = Tensor::host_f32({1}, {24.0f});
  for (bool rms : {false, true}) {
    auto norm = [&](const Tensor& y, const Fp8SideOutput& fp8) {
      Tensor mean = host_zeros({6}), rstd = host_zeros({6});
      if (rms)
        rmsnorm_forward(cpu(), x, w, kEps, y, rstd, fp8);
      else
        layernorm_forward(cpu(), x, w, b, kEps, y, mean, rstd, fp8);
    };
    Tensor y_ref = host_zeros({6, 16}), q_ref = Tensor::host(DType::u8, {6, 16});
    Tensor amax_ref = Tensor::host_f32({1}, {0.0f});
    norm(y_ref, {});
    fp8_cast(cpu(), y_ref, scale, Fp8Format::e4m3, q_ref);
    fp8_amax(cpu(), y_ref, amax_ref);
    Tensor y = host_zeros({6, 16}), q = Tensor::host(DType::u8, {6, 16});
    Tensor amax = Tensor::host_f32({1}, {0.0f}), amax_only = Tensor::host_f32({1}, {0.0f});
    norm(y, {q, scale, amax});
    EXPECT_EQ(max_abs_diff(y, y_ref), 0.0) << "rms " << rms;
    EXPECT_EQ(amax.at(0), amax_ref.at(0)) << "rms " << rms;
    for (int64_t i = 0; i < q.numel(); ++i) EXPECT_EQ(q.data_as<uint8_t>()[i], q_ref.data_as<uint8_t>()[i]) << i;
    norm(y, {Tensor(), Tensor(), amax_only});  // tensorwise: the amax alone
    EXPECT_EQ(amax_only.at(0), amax_ref.at(0)) << "rms " << rms;
  }
  Tensor y = host_zeros({6, 16}), stat = host_zeros({6});
  expect_error_mentions(
      [&] {
        layernorm_forward(cpu(), x, w, b, kEps, y, stat, stat, {Tensor::host(DType::u8, {6, 8}), scale, Tensor()});
      },
      "'fp8.q'");
  expect_error_mentions(
      [&] {
        rmsnorm_forward(cpu(), x, w, kEps, y, stat, {Tensor::host(DType::u8, {6, 16}), Tensor(), Tensor()});
      },
      "fp8.scale");
}

TEST(Norm, BadArgumentsAreErrorsNamingTheArgument) {
  Tensor x = Tensor::host(DType::f32, {4, 8}), w = Tensor::host(DType::f32, {8}), y = Tensor::host(DType::f32, {4, 8});
  Tensor stat = Tensor::host(DType::f32, {4}), dw = Tensor::host(DType::f32, {8});
  expect_error_mentions(
      [&] {
        layernorm_forward(cpu(), x.view({2, 2, 8}), w, Tensor(), kEps, y, stat, stat);
      },
      "x must be [N, C]");
  expect_error_mentions(
      [&] { layernorm_forward(cpu(), x, Tensor::host(DType::f32, {7}), Tensor(), kEps, y, stat, stat); }, "'w'");
  expect_error_mentions([&] { layernorm_forward(cpu(), x, w, Tensor::host(DType::f32, {4}), kEps, y, stat, stat); },
                        "'b'");
  expect_error_mentions(
      [&] {
        layernorm_forward(cpu(), x, w, Tensor(), kEps, Tensor::host(DType::f32, {4, 7}), stat, stat);
      },
      "'y'");
  expect_error_mentions([&] { layernorm_forward(cpu(), x, w, Tensor(), kEps, y, Tensor::host(DType::i32, {4}), stat); },
                        "'mean'");
  expect_error_mentions(
      [&] {
        layernorm_forward(cpu(), Tensor::host(DType::bf16, {4, 8}), w, Tensor(), kEps, y, stat, stat);
      },
      "'x'");
  expect_error_mentions([&] { layernorm_backward(cpu(), y, x, w, stat, stat, x, Tensor::host(DType::f32, {9}), dw); },
                        "'dw'");
  expect_error_mentions([&] { layernorm_backward(cpu(), y, x, w, stat, stat, x, dw, Tensor::host(DType::f32, {9})); },
                        "'db'");
  expect_error_mentions(
      [&] {
        layernorm_backward(cpu(), Tensor::host(DType::f32, {4, 9}), x, w, stat, stat, x, dw, dw);
      },
      "'dy'");
  expect_error_mentions([&] { rmsnorm_forward(cpu(), x, w, kEps, y, Tensor::host(DType::f32, {5})); }, "'rstd'");
  expect_error_mentions([&] { rmsnorm_backward(cpu(), y, x, w, stat, Tensor::host(DType::f32, {4, 4}), dw); }, "'dx'");
  expect_error_mentions([&] { rmsnorm_forward(cpu(), x, w, -1.0f, y, stat); }, "eps");
}

}  // namespace
}  // namespace troupe::test
