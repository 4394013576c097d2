#include <cmath>

#include "kernels/activation.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;
}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y) {
  const float* in = x.data_as<float>();
  float* out = y.data_as<float>();
  const int64_t n = x.numel();
#pragma omp parallel for if (worth_parallel(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    out[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kGeluCoef * v * v * v)));
  }
}

void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  const float* in = x.data_as<float>();
  const float* g = dy.data_as<float>();
  float* out = dx.data_as<float>();
  const int64_t n = x.numel();
#pragma omp parallel for if (worth_parallel(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float u = kSqrt2OverPi * (v + kGeluCoef * v * v * v);
    const float th = std::tanh(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * v * v);
    out[i] = g[i] * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
  }
}

void swiglu_forward(const Tensor& x, const Tensor& y) {
  const int64_t n = x.dim(0), f = y.dim(1);
  const float* in = x.data_as<float>();
  float* out = y.data_as<float>();
#pragma omp parallel for if (worth_parallel(n * f)) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float* gate = in + r * 2 * f;
    const float* up = gate + f;
    for (int64_t j = 0; j < f; ++j) {
      const float s = 1.0f / (1.0f + std::exp(-gate[j]));
      out[r * f + j] = gate[j] * s * up[j];
    }
  }
}

void swiglu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  const int64_t n = x.dim(0), f = dy.dim(1);
  const float* in = x.data_as<float>();
  const float* g = dy.data_as<float>();
  float* out = dx.data_as<float>();
#pragma omp parallel for if (worth_parallel(n * f)) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float* gate = in + r * 2 * f;
    const float* up = gate + f;
    float* dgate = out + r * 2 * f;
    float* dup = dgate + f;
    for (int64_t j = 0; j < f; ++j) {
      const float s = 1.0f / (1.0f + std::exp(-gate[j]));
      const float silu = gate[j] * s;
      const float gj = g[r * f + j];
      dup[j] = gj * silu;
      dgate[j] = gj * up[j] * (s * (1.0f + gate[j] * (1.0f - s)));
    }
  }
}

}  // namespace troupe::cpu
