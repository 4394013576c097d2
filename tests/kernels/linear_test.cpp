// CPU linear layer against naive triple loops and finite differences.
#include "kernels/linear.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// y[M, N] = x[M, K] · w[N, K]^T + b[N], in f64.
Tensor naive_forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  Tensor y = Tensor::host(DType::f32, {m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = b.defined() ? b.at(j) : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(x.at(i * k + p)) * w.at(j * k + p);
      y.at(i * n + j) = float(s);
    }
  return y;
}

struct NaiveGrads {
  Tensor dx, dw, db;  // [M, K], [N, K], [N]
};

NaiveGrads naive_backward(const Tensor& dy, const Tensor& x, const Tensor& w) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  NaiveGrads g{Tensor::host(DType::f32, {m, k}), Tensor::host(DType::f32, {n, k}), Tensor::host(DType::f32, {n})};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += double(dy.at(i * n + j)) * w.at(j * k + p);
      g.dx.at(i * k + p) = float(s);
    }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) {
      double s = 0;
      for (int64_t i = 0; i < m; ++i) s += double(dy.at(i * n + j)) * x.at(i * k + p);
      g.dw.at(j * k + p) = float(s);
    }
    double s = 0;
    for (int64_t i = 0; i < m; ++i) s += dy.at(i * n + j);
    g.db.at(j) = float(s);
  }
  return g;
}

Tensor plus(const Tensor& a, const Tensor& b) {
  Tensor c = Tensor::host(DType::f32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) c.at(i) = a.at(i) + b.at(i);
  return c;
}

Tensor clone(const Tensor& a) { return plus(a, Tensor::zeros(cpu(), DType::f32, a.shape())); }

constexpr int64_t kM = 13, kK = 24, kN = 300;  // N > one 256-column band of the db reduction

TEST(Linear, ForwardMatchesNaiveLoop) {
  Tensor x = random_normal({kM, kK}, 1), w = random_normal({kN, kK}, 2), b = random_normal({kN}, 3);
  Tensor y = Tensor::host(DType::f32, {kM, kN});
  linear_forward(cpu(), x, w, b, y);
  EXPECT_LT(rel_error(y, naive_forward(x, w, b)), 1e-6);
  linear_forward(cpu(), x, w, Tensor(), y);
  EXPECT_LT(rel_error(y, naive_forward(x, w, Tensor())), 1e-6);
}

TEST(Linear, ForwardAccumulatesIntoY) {  // the residual add fused into the GEMM
  Tensor x = random_normal({kM, kK}, 1), w = random_normal({kN, kK}, 2), b = random_normal({kN}, 3);
  const Tensor y0 = random_normal({kM, kN}, 4);
  Tensor y = clone(y0);
  linear_forward(cpu(), x, w, b, y, /*accumulate=*/true);
  EXPECT_LT(rel_error(y, plus(y0, naive_forward(x, w, b))), 1e-6);
  y = clone(y0);
  linear_forward(cpu(), x, w, Tensor(), y, /*accumulate=*/true);
  EXPECT_LT(rel_error(y, plus(y0, naive_forward(x, w, Tensor()))), 1e-6);
}

TEST(Linear, BackwardMatchesNaiveLoopAndAccumulates) {
  Tensor x = random_normal({kM, kK}, 4), w = random_normal({kN, kK}, 5), dy = random_normal({kM, kN}, 6);
  const NaiveGrads ref = naive_backward(dy, x, w);
  // dw and db start from earlier contributions and must be added to; dx is overwritten.
  Tensor dw0 = random_normal({kN, kK}, 7), db0 = random_normal({kN}, 8);
  Tensor dx = random_normal({kM, kK}, 9), dw = clone(dw0), db = clone(db0);
  linear_backward(cpu(), dy, x, w, dx, dw, db);
  EXPECT_LT(rel_error(dx, ref.dx), 1e-6);
  EXPECT_LT(rel_error(dw, plus(dw0, ref.dw)), 1e-6);
  EXPECT_LT(rel_error(db, plus(db0, ref.db)), 1e-6);
}

TEST(Linear, AccumulateDxAddsToDx) {
  Tensor x = random_normal({kM, kK}, 10), w = random_normal({kN, kK}, 11), dy = random_normal({kM, kN}, 12);
  const NaiveGrads ref = naive_backward(dy, x, w);
  Tensor dx0 = random_normal({kM, kK}, 13), dx = clone(dx0);
  Tensor dw = Tensor::zeros(cpu(), DType::f32, {kN, kK});
  linear_backward(cpu(), dy, x, w, dx, dw, Tensor(), /*accumulate_dx=*/true);
  EXPECT_LT(rel_error(dx, plus(dx0, ref.dx)), 1e-6);
  EXPECT_LT(rel_error(dw, ref.dw), 1e-6);
}

TEST(Linear, UndefinedDxAndDbAreSkipped) {
  Tensor x = random_normal({kM, kK}, 14), w = random_normal({kN, kK}, 15), dy = random_normal({kM, kN}, 16);
  Tensor dw = Tensor::zeros(cpu(), DType::f32, {kN, kK});
  linear_backward(cpu(), dy, x, w, Tensor(), dw, Tensor());
  linear_backward(cpu(), dy, x, w, Tensor(), dw, Tensor());  // twice: dw holds 2x the gradient
  Tensor twice = naive_backward(dy, x, w).dw;
  for (int64_t i = 0; i < twice.numel(); ++i) twice.at(i) *= 2.0f;
  EXPECT_LT(rel_error(dw, twice), 1e-6);
}

// Zero-bubble's split backward: dx alone (dw and db undefined), then dw and db alone (dx
// undefined), gives the fused op's bits.
TEST(Linear, SplitBackwardEqualsTheWholeOpBitForBit) {
  Tensor x = random_normal({kM, kK}, 17), w = random_normal({kN, kK}, 18), dy = random_normal({kM, kN}, 19);
  Tensor dx = Tensor::zeros(cpu(), DType::f32, {kM, kK}), dw = random_normal({kN, kK}, 20),
         db = random_normal({kN}, 21);
  Tensor dx_split = Tensor::zeros(cpu(), DType::f32, {kM, kK}), dw_split = clone(dw), db_split = clone(db);
  linear_backward(cpu(), dy, x, w, dx, dw, db);
  linear_backward(cpu(), dy, x, w, dx_split, Tensor(), Tensor());
  EXPECT_EQ(max_abs_diff(dx_split, dx), 0.0);
  EXPECT_GT(max_abs_diff(dw_split, dw), 0.0);  // the input-gradient op left dw alone
  linear_backward(cpu(), dy, x, w, Tensor(), dw_split, db_split);
  EXPECT_EQ(max_abs_diff(dw_split, dw), 0.0);
  EXPECT_EQ(max_abs_diff(db_split, db), 0.0);
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  Tensor x = random_normal({5, 7}, 17), w = random_normal({6, 7}, 18), b = random_normal({6}, 19);
  Tensor y = Tensor::host(DType::f32, {5, 6}), r = random_normal({5, 6}, 20);
  auto loss = [&] {
    linear_forward(cpu(), x, w, b, y);
    return dot(y, r);
  };
  Tensor dx = Tensor::host(DType::f32, x.shape());
  Tensor dw = Tensor::zeros(cpu(), DType::f32, w.shape()), db = Tensor::zeros(cpu(), DType::f32, b.shape());
  linear_backward(cpu(), r, x, w, dx, dw, db);
  expect_grad_close("linear dx", loss, x, dx);
  expect_grad_close("linear dw", loss, w, dw);
  expect_grad_close("linear db", loss, b, db);
}

TEST(Linear, ShapeAndDtypeErrors) {
  Tensor x = Tensor::host(DType::f32, {4, 8}), w = Tensor::host(DType::f32, {3, 8});
  Tensor b = Tensor::host(DType::f32, {3}), y = Tensor::host(DType::f32, {4, 3});
  Tensor dy = Tensor::host(DType::f32, {4, 3}), dx = Tensor::host(DType::f32, {4, 8});
  Tensor dw = Tensor::host(DType::f32, {3, 8}), db = Tensor::host(DType::f32, {3});
  EXPECT_THROW(linear_forward(cpu(), x, Tensor::host(DType::f32, {3, 7}), b, y), Error);            // K differs
  EXPECT_THROW(linear_forward(cpu(), x, w, Tensor::host(DType::f32, {4}), y), Error);               // b not [N]
  EXPECT_THROW(linear_forward(cpu(), x, w, b, Tensor::host(DType::f32, {4, 4})), Error);            // y not [M, N]
  EXPECT_THROW(linear_forward(cpu(), x.view({32}), w, b, y), Error);                                // x not 2-D
  EXPECT_THROW(linear_forward(cpu(), Tensor::host(DType::bf16, {4, 8}), w, b, y), Error);           // CPU is f32
  EXPECT_THROW(linear_backward(cpu(), Tensor::host(DType::f32, {4, 4}), x, w, dx, dw, db), Error);  // dy
  EXPECT_THROW(linear_backward(cpu(), dy, x, w, Tensor::host(DType::f32, {4, 3}), dw, db), Error);  // dx
  EXPECT_THROW(linear_backward(cpu(), dy, x, w, dx, Tensor::host(DType::f32, {8, 3}), db), Error);  // dw
  EXPECT_THROW(linear_backward(cpu(), dy, x, w, dx, dw, Tensor::host(DType::f32, {8})), Error);     // db
  // An undefined dw is allowed (SplitBackwardEqualsTheWholeOpBitForBit); a dw of another dtype is not.
  EXPECT_THROW(linear_backward(cpu(), dy, x, w, dx, Tensor::host(DType::bf16, {3, 8}), db), Error);
  // The messages name the op and the argument.
  try {
    linear_forward(cpu(), x, w, Tensor::host(DType::f32, {4}), y);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe::test
