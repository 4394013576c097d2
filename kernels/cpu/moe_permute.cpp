#include <algorithm>

#include "kernels/cpu/parallel.hpp"
#include "kernels/moe_permute.hpp"

namespace troupe::cpu {

void moe_permute_forward(const Tensor& x, const MoeRowMap& map, const Tensor& xp) {
  const int64_t rows = xp.dim(0), c = x.dim(1), k = map.choice_row.dim(1);
  const int32_t* choice = map.row_choice.data_as<int32_t>();
#pragma omp parallel for if (worth_parallel(rows * c)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* out = xp.data_as<float>() + r * c;
    if (choice[r] < 0) {
      std::fill(out, out + c, 0.0f);
      continue;
    }
    const float* in = x.data_as<float>() + (choice[r] / k) * c;
    std::copy(in, in + c, out);
  }
}

void moe_permute_backward(const Tensor& dxp, const MoeRowMap& map, const Tensor& dx) {
  const int64_t n = dx.dim(0), c = dx.dim(1), k = map.choice_row.dim(1);
  const int32_t* rows = map.choice_row.data_as<int32_t>();
#pragma omp parallel for if (worth_parallel(n * c * k)) schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    float* out = dx.data_as<float>() + t * c;
    std::fill(out, out + c, 0.0f);
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = rows[t * k + i];
      if (r < 0) continue;
      const float* in = dxp.data_as<float>() + int64_t(r) * c;
      for (int64_t j = 0; j < c; ++j) out[j] += in[j];
    }
  }
}

void moe_unpermute_forward(const Tensor& yp, const MoeRowMap& map, const Tensor& probs, const Tensor& y) {
  const int64_t n = y.dim(0), c = y.dim(1), k = map.choice_row.dim(1);
  const int32_t* rows = map.choice_row.data_as<int32_t>();
  const float* p = probs.data_as<float>();
#pragma omp parallel for if (worth_parallel(n * c * k)) schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    float* out = y.data_as<float>() + t * c;
    std::fill(out, out + c, 0.0f);
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = rows[t * k + i];
      if (r < 0) continue;
      const float w = p[t * k + i];
      const float* in = yp.data_as<float>() + int64_t(r) * c;
      for (int64_t j = 0; j < c; ++j) out[j] += w * in[j];
    }
  }
}

void moe_unpermute_backward(const Tensor& dy, const Tensor& yp, const MoeRowMap& map, const Tensor& probs,
                            const Tensor& dyp, const Tensor& dprobs) {
  const int64_t rows = dyp.dim(0), n = dy.dim(0), c = dy.dim(1), k = map.choice_row.dim(1);
  const int32_t* choice = map.row_choice.data_as<int32_t>();
  const int32_t* row_of = map.choice_row.data_as<int32_t>();
  const float* p = probs.data_as<float>();
#pragma omp parallel for if (worth_parallel(rows * c)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* out = dyp.data_as<float>() + r * c;
    if (choice[r] < 0) {
      std::fill(out, out + c, 0.0f);
      continue;
    }
    const float w = p[choice[r]];
    const float* g = dy.data_as<float>() + (choice[r] / k) * c;
    for (int64_t j = 0; j < c; ++j) out[j] = w * g[j];
  }
#pragma omp parallel for if (worth_parallel(n * c * k)) schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = row_of[t * k + i];
      float sum = 0.0f;
      if (r >= 0) {
        const float* g = dy.data_as<float>() + t * c;
        const float* v = yp.data_as<float>() + int64_t(r) * c;
        for (int64_t j = 0; j < c; ++j) sum += g[j] * v[j];
      }
      dprobs.data_as<float>()[t * k + i] = sum;
    }
  }
}

}  // namespace troupe::cpu
