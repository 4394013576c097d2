#include <cblas.h>

#include <algorithm>

#include "kernels/linear.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

namespace {
// BLAS wants leading dimensions >= 1 even when a matrix is empty.
int ld(int64_t n) { return int(std::max<int64_t>(n, 1)); }
// Columns per task of the bias-gradient reduction: a task walks all rows of its band.
constexpr int64_t kBiasGradColumns = 256;
}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool accumulate) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (m == 0 || n == 0) return;
  float* out = y.data_as<float>();
  // y = b broadcast over rows (y += b when accumulating), then y += x w^T (beta = 1); without a
  // bias and not accumulating, beta = 0.
  float beta = accumulate ? 1.0f : 0.0f;
  if (b.defined()) {
    const float* bias = b.data_as<float>();
#pragma omp parallel for if (worth_parallel(m * n)) schedule(static)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) out[r * n + c] = accumulate ? out[r * n + c] + bias[c] : bias[c];
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, x.data_as<float>(), ld(k),
              w.data_as<float>(), ld(k), beta, out, ld(n));
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
                     const Tensor& db, bool accumulate_dx) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  const float* g = dy.data_as<float>();
  // dx[M, K] = dy[M, N] · w[N, K]
  if (dx.defined() && m > 0 && k > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(k), int(n), 1.0f, g, ld(n), w.data_as<float>(),
                ld(k), accumulate_dx ? 1.0f : 0.0f, dx.data_as<float>(), ld(k));
  }
  // dw[N, K] += dy^T · x
  if (dw.defined() && n > 0 && k > 0) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n), int(k), int(m), 1.0f, g, ld(n), x.data_as<float>(),
                ld(k), 1.0f, dw.data_as<float>(), ld(k));
  }
  if (db.defined()) bias_grad_accumulate(dy, db);
}

void bias_grad_accumulate(const Tensor& dy, const Tensor& db) {
  // db[N] += column sums of dy; each task owns a band of columns and walks the rows in order.
  const int64_t m = dy.dim(0), n = dy.dim(1);
  const float* g = dy.data_as<float>();
  float* acc = db.data_as<float>();
#pragma omp parallel for if (worth_parallel(m * n)) schedule(static)
  for (int64_t c0 = 0; c0 < n; c0 += kBiasGradColumns) {
    const int64_t c1 = std::min(n, c0 + kBiasGradColumns);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = c0; c < c1; ++c) acc[c] += g[r * n + c];
  }
}

}  // namespace troupe::cpu
