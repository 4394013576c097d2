// LayerNorm / RMSNorm reference: f32 tensors, row sums in f64. RMSNorm is LayerNorm
// without centering (mean taken as 0) and without bias, so both share the loops below.
// The loops take each tensor's rows through a RowMap, so the per-head norms (rows of D values a
// head apart inside a fused activation) run the same code as plain [N, C] rows.
#include <algorithm>
#include <cmath>

#include "kernels/norm.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

namespace {

// Column tile of the parameter-gradient loop: each thread owns a tile, so dw/db need no
// atomics and the sum over rows runs in a fixed order.
constexpr int64_t kColumnTile = 64;

// Where row r of c values starts: rows come in groups of `per` contiguous rows (one token's
// heads), groups `stride` elements apart. Plain [N, C] rows: per 1, stride C.
struct RowMap {
  int64_t per = 1, stride = 0;
  int64_t at(int64_t r, int64_t c) const { return (r / per) * stride + (r % per) * c; }
};

// n rows of c values; x: the input's rows, y: the output's (forward) or dy's and dx's (backward).
struct NormRows {
  int64_t n = 0, c = 0;
  RowMap x, y;
};

NormRows plain_rows(const Tensor& x) { return {x.dim(0), x.dim(1), {1, x.dim(1)}, {1, x.dim(1)}}; }

// Heads [first, first + count) of x [N, Wx] and of y [N, Wy] (pointers start at the first head).
NormRows head_rows(const Tensor& x, const Tensor& y, int64_t d, HeadSpan heads) {
  return {x.dim(0) * heads.count, d, {heads.count, x.dim(1)}, {heads.count, y.dim(1)}};
}

// mean (nullable: RMSNorm), rstd: [n]; b nullable.
void norm_forward_rows(const float* x, const float* w, const float* b, float eps, float* y, float* mean, float* rstd,
                       const NormRows& rows) {
  const int64_t c = rows.c;
#pragma omp parallel for if (worth_parallel(rows.n * c)) schedule(static)
  for (int64_t r = 0; r < rows.n; ++r) {
    const float* xr = x + rows.x.at(r, c);
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
    float* yr = y + rows.y.at(r, c);  // may be xr (in place): each element is read before it is written
    for (int64_t j = 0; j < c; ++j) yr[j] = (xr[j] - m) * s * w[j] + (b ? b[j] : 0.0f);
  }
}

// dx = [dx_in +] rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * w.
// Without centering (RMSNorm) the mean(dxhat) term drops out. dx_in (rows like dy's) may be dx (in
// place); null overwrites dx, which may then be dy.
void norm_backward_input(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                         const float* dx_in, float* dx, const NormRows& rows) {
  const int64_t c = rows.c;
#pragma omp parallel for if (worth_parallel(rows.n * c)) schedule(static)
  for (int64_t r = 0; r < rows.n; ++r) {
    const float* xr = x + rows.x.at(r, c);
    const float* dyr = dy + rows.y.at(r, c);
    const float m = mean ? mean[r] : 0.0f, s = rstd[r];
    double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const double dxhat = double(dyr[j]) * w[j];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * ((xr[j] - m) * s);
    }
    const float mean_dxhat = mean ? float(sum_dxhat / double(c)) : 0.0f;
    const float mean_dxhat_xhat = float(sum_dxhat_xhat / double(c));
    const float* dx_inr = dx_in ? dx_in + rows.y.at(r, c) : nullptr;
    float* dxr = dx + rows.y.at(r, c);
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (xr[j] - m) * s;
      const float g = s * (dyr[j] * w[j] - mean_dxhat - xhat * mean_dxhat_xhat);
      dxr[j] = dx_inr ? dx_inr[j] + g : g;
    }
  }
}

// dw += sum over rows of dy * xhat; db (nullable) += sum over rows of dy.
void norm_backward_params(const float* dy, const float* x, const float* mean, const float* rstd, float* dw, float* db,
                          const NormRows& rows) {
  const int64_t c = rows.c, tiles = (c + kColumnTile - 1) / kColumnTile;
#pragma omp parallel for if (worth_parallel(rows.n * c)) schedule(static)
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t j0 = tile * kColumnTile, width = std::min(kColumnTile, c - j0);
    double acc_w[kColumnTile] = {}, acc_b[kColumnTile] = {};
    for (int64_t r = 0; r < rows.n; ++r) {
      const float m = mean ? mean[r] : 0.0f, s = rstd[r];
      const float* xr = x + rows.x.at(r, c) + j0;
      const float* dyr = dy + rows.y.at(r, c) + j0;
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
                    mean.data_as<float>(), rstd.data_as<float>(), plain_rows(x));
}

// The parameter gradients first: with dx aliasing dy the input gradient must come last.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dx_in) {
  const NormRows rows = plain_rows(x);
  norm_backward_params(dy.data_as<float>(), x.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>(),
                       dw.data_as<float>(), data_or_null(db), rows);
  norm_backward_input(dy.data_as<float>(), x.data_as<float>(), w.data_as<float>(), mean.data_as<float>(),
                      rstd.data_as<float>(), dx_in.data_as<float>(), dx.data_as<float>(), rows);
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd) {
  norm_forward_rows(x.data_as<float>(), w.data_as<float>(), nullptr, eps, y.data_as<float>(), nullptr,
                    rstd.data_as<float>(), plain_rows(x));
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw, const Tensor& dx_in) {
  const NormRows rows = plain_rows(x);
  norm_backward_params(dy.data_as<float>(), x.data_as<float>(), nullptr, rstd.data_as<float>(), dw.data_as<float>(),
                       nullptr, rows);
  norm_backward_input(dy.data_as<float>(), x.data_as<float>(), w.data_as<float>(), nullptr, rstd.data_as<float>(),
                      dx_in.data_as<float>(), dx.data_as<float>(), rows);
}

void rmsnorm_heads_forward(const Tensor& x, const Tensor& w, float eps, HeadSpan heads, const Tensor& y,
                           const Tensor& rstd) {
  const int64_t d = w.dim(0), first = heads.first * d;
  norm_forward_rows(x.data_as<float>() + first, w.data_as<float>(), nullptr, eps, y.data_as<float>() + first, nullptr,
                    rstd.data_as<float>(), head_rows(x, y, d, heads));
}

void rmsnorm_heads_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, HeadSpan heads,
                            const Tensor& dx, const Tensor& dw) {
  const int64_t d = w.dim(0), first = heads.first * d;
  const NormRows rows = head_rows(x, dy, d, heads);
  norm_backward_params(dy.data_as<float>() + first, x.data_as<float>() + first, nullptr, rstd.data_as<float>(),
                       dw.data_as<float>(), nullptr, rows);
  norm_backward_input(dy.data_as<float>() + first, x.data_as<float>() + first, w.data_as<float>(), nullptr,
                      rstd.data_as<float>(), nullptr, dx.data_as<float>() + first, rows);
}

}  // namespace troupe::cpu
