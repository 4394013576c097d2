// FP8 GEMM reference: the fp8 values (exact in f32) multiplied by OpenBLAS, then scaled by
// a_scale_inv * b_scale_inv as cuBLASLt scales its f32 accumulator.
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/parallel.hpp"
#include "kernels/fp8_gemm.hpp"

namespace troupe::cpu {

namespace {

Tensor values_of(const Fp8Operand& x) {
  Tensor one = Tensor::host_f32({1}, {1.0f});
  Tensor v = Tensor::host(DType::f32, x.data.shape());
  fp8_dequantize(x.data, x.format, one, v);
  return v;
}

}  // namespace

void fp8_gemm(const Fp8Operand& a, const Fp8Operand& b, const Tensor& d, float beta, const Tensor& bias) {
  const int64_t m = a.data.dim(0), k = a.data.dim(1), n = b.data.dim(0);
  if (m == 0 || n == 0) return;
  const Tensor av = values_of(a), bv = values_of(b);
  Tensor acc = Tensor::host(DType::f32, {m, n});
  const int ldk = int(std::max<int64_t>(k, 1)), ldn = int(std::max<int64_t>(n, 1));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, av.data_as<float>(), ldk,
              bv.data_as<float>(), ldk, 0.0f, acc.data_as<float>(), ldn);
  const float scale = a.scale_inv.data_as<float>()[0] * b.scale_inv.data_as<float>()[0];
  const float* in = acc.data_as<float>();
  const float* bias_v = bias.defined() ? bias.data_as<float>() : nullptr;
  float* out = d.data_as<float>();
#pragma omp parallel for if (worth_parallel(m * n)) schedule(static)
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      float v = scale * in[r * n + c];
      if (bias_v) v += bias_v[c];
      out[r * n + c] = beta == 0.0f ? v : out[r * n + c] + v;
    }
  }
}

}  // namespace troupe::cpu
