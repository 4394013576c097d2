#include <cmath>
#include <vector>

#include "kernels/moe_shared_gate.hpp"

namespace troupe::cpu {

void moe_shared_gate_forward(const Tensor& x, const Tensor& gate_w, const Tensor& out, const Tensor& gate,
                             const Tensor& y) {
  const int64_t n = x.dim(0), c = x.dim(1);
  const float* w = gate_w.data_as<float>();
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x.data_as<float>() + t * c;
    float logit = 0.0f;
    for (int64_t j = 0; j < c; ++j) logit += xt[j] * w[j];
    const float g = gate.data_as<float>()[t] = 1.0f / (1.0f + std::exp(-logit));
    const float* o = out.data_as<float>() + t * c;
    float* dst = y.data_as<float>() + t * c;
    for (int64_t j = 0; j < c; ++j) dst[j] += g * o[j];
  }
}

void moe_shared_gate_backward(const Tensor& x, const Tensor& gate_w, const Tensor& gate, const Tensor& out,
                              const Tensor& dy, const Tensor& dout, const Tensor& dx, const Tensor& dgate_w) {
  const int64_t n = x.dim(0), c = x.dim(1);
  const float* w = gate_w.data_as<float>();
  std::vector<float> dlogit(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const float g = gate.data_as<float>()[t];
    const float* d = dy.data_as<float>() + t * c;
    const float* o = out.data_as<float>() + t * c;
    float* od = dout.data_as<float>() + t * c;
    float dot = 0.0f;
    for (int64_t j = 0; j < c; ++j) {
      od[j] = g * d[j];
      dot += d[j] * o[j];
    }
    const float dl = dlogit[size_t(t)] = dot * g * (1.0f - g);
    float* dxt = dx.data_as<float>() + t * c;
    for (int64_t j = 0; j < c; ++j) dxt[j] += dl * w[j];
  }
  float* dw = dgate_w.data_as<float>();
  for (int64_t j = 0; j < c; ++j) {
    float sum = 0.0f;
    for (int64_t t = 0; t < n; ++t) sum += dlogit[size_t(t)] * x.data_as<float>()[t * c + j];
    dw[j] += sum;
  }
}

}  // namespace troupe::cpu
