// LayerNorm / RMSNorm reference: f32 tensors, row sums in f64. RMSNorm is LayerNorm
// without centering (mean taken as 0) and without bias, so both share the loops below.
#include <algorithm>
#include <cmath>

#include "kernels/norm.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

namespace {

// Column tile of the parameter-gradient loop: each thread owns a tile, so dw/db need no
// atomics and the sum over rows runs in a fixed order.
constexpr int64_t kColumnTile = 64;

// mean (nullable: RMSNorm), rstd: [n]; b nullable.
void norm_forward_rows(const float* x, const float* w, const float* b, float eps, float* y, float* mean, float* rstd,
                       int64_t n, int64_t c) {
#pragma omp parallel for if (worth_parallel(n * c)) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * c;
    double mu = 0.0;
    if (mean) {
      for (int64_t j = 0; j < c; ++j) mu += xr[j];
      mu /= double(c);
    }
    double var = 0.0;  // second pass about the mean: no cancellation when |mean| >> std
    for (int64_t j = 0; j < c; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= double(c);
    const float m = float(mu), s = float(1.0 / std::sqrt(var + double(eps)));
    if (mean) mean[r] = m;
    rstd[r] = s;
    float* yr = y + r * c;
    for (int64_t j = 0; j < c; ++j) yr[j] = (xr[j] - m) * s * w[j] + (b ? b[j] : 0.0f);
  }
}

// dx += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * w.
// Without centering (RMSNorm) the mean(dxhat) term drops out.
void norm_backward_input(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                         float* dx, int64_t n, int64_t c) {
#pragma omp parallel for if (worth_parallel(n * c)) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * c;
    const float* dyr = dy + r * c;
    const float m = mean ? mean[r] : 0.0f, s = rstd[r];
    double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const double dxhat = double(dyr[j]) * w[j];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * ((xr[j] - m) * s);
    }
    const float mean_dxhat = mean ? float(sum_dxhat / double(c)) : 0.0f;
    const float mean_dxhat_xhat = float(sum_dxhat_xhat / double(c));
    float* dxr = dx + r * c;
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (xr[j] - m) * s;
      dxr[j] += s * (dyr[j] * w[j] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

// dw += sum over rows of dy * xhat; db (nullable) += sum over rows of dy.
void norm_backward_params(const float* dy, const float* x, const float* mean, const float* rstd, float* dw, float* db,
                          int64_t n, int64_t c) {
  const int64_t tiles = (c + kColumnTile - 1) / kColumnTile;
#pragma omp parallel for if (worth_parallel(n * c)) schedule(static)
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t j0 = tile * kColumnTile, width = std::min(kColumnTile, c - j0);
    double acc_w[kColumnTile] = {}, acc_b[kColumnTile] = {};
    for (int64_t r = 0; r < n; ++r) {
      const float m = mean ? mean[r] : 0.0f, s = rstd[r];
      const float* xr = x + r * c + j0;
      const float* dyr = dy + r * c + j0;
      for (int64_t k = 0; k < width; ++k) {
        acc_w[k] += double(dyr[k]) * ((xr[k] - m) * s);
        acc_b[k] += dyr[k];
      }
    }
    for (int64_t k = 0; k < width; ++k) {
      dw[j0 + k] += float(acc_w[k]);
      if (db) db[j0 + k] += float(acc_b[k]);
    }
  }
}

float* data_or_null(const Tensor& t) { return t.defined() ? t.data_as<float>() : nullptr; }

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  norm_forward_rows(x.data_as<float>(), w.data_as<float>(), data_or_null(b), eps, y.data_as<float>(),
                    mean.data_as<float>(), rstd.data_as<float>(), x.dim(0), x.dim(1));
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const int64_t n = x.dim(0), c = x.dim(1);
  norm_backward_input(dy.data_as<float>(), x.data_as<float>(), w.data_as<float>(), mean.data_as<float>(),
                      rstd.data_as<float>(), dx.data_as<float>(), n, c);
  norm_backward_params(dy.data_as<float>(), x.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>(),
                       dw.data_as<float>(), data_or_null(db), n, c);
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd) {
  norm_forward_rows(x.data_as<float>(), w.data_as<float>(), nullptr, eps, y.data_as<float>(), nullptr,
                    rstd.data_as<float>(), x.dim(0), x.dim(1));
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw) {
  const int64_t n = x.dim(0), c = x.dim(1);
  norm_backward_input(dy.data_as<float>(), x.data_as<float>(), w.data_as<float>(), nullptr, rstd.data_as<float>(),
                      dx.data_as<float>(), n, c);
  norm_backward_params(dy.data_as<float>(), x.data_as<float>(), nullptr, rstd.data_as<float>(), dw.data_as<float>(),
                       nullptr, n, c);
}

}  // namespace troupe::cpu
