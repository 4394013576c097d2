// FP8 reference ops: the casts through the host conversions of kernels/fp8_convert.cpp.
#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/cpu/parallel.hpp"
#include "kernels/fp8.hpp"
#include "kernels/fp8_scale.hpp"

namespace troupe::cpu {

namespace {

// Every fp8 byte's value: dequantizing is a table lookup.
std::array<float, 256> value_table(Fp8Format f) {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b) t[size_t(b)] = fp8_to_f32(uint8_t(b), f);
  return t;
}

const std::array<float, 256>& values_of(Fp8Format f) {
  static const std::array<float, 256> e4m3 = value_table(Fp8Format::e4m3);
  static const std::array<float, 256> e5m2 = value_table(Fp8Format::e5m2);
  return f == Fp8Format::e4m3 ? e4m3 : e5m2;
}

uint32_t bits_of(float x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof(x));
  return b;
}

}  // namespace

void fp8_cast(const Tensor& x, const Tensor& scale, Fp8Format f, const Tensor& q) {
  const float* in = x.data_as<float>();
  uint8_t* out = q.data_as<uint8_t>();
  const float s = scale.data_as<float>()[0];
  const int64_t n = x.numel();
#pragma omp parallel for if (worth_parallel(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = fp8_from_f32(in[i] * s, f);
}

void fp8_dequantize(const Tensor& q, Fp8Format f, const Tensor& scale_inv, const Tensor& y) {
  const auto& values = values_of(f);
  const uint8_t* in = q.data_as<uint8_t>();
  float* out = y.data_as<float>();
  const float s = scale_inv.data_as<float>()[0];
  const int64_t n = q.numel();
#pragma omp parallel for if (worth_parallel(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = values[in[i]] * s;
}

// The max of |x| compared as bits: for non-negative floats the order of the bit patterns is
// the order of the values, and a NaN's bits exceed infinity's (the CUDA kernel's atomicMax).
void fp8_amax(const Tensor& x, const Tensor& amax) {
  const float* in = x.data_as<float>();
  uint32_t best = bits_of(amax.data_as<float>()[0]) & 0x7FFFFFFFu;
  const int64_t n = x.numel();
#pragma omp parallel for if (worth_parallel(n)) schedule(static) reduction(max : best)
  for (int64_t i = 0; i < n; ++i) best = std::max(best, bits_of(in[i]) & 0x7FFFFFFFu);
  std::memcpy(amax.data(), &best, sizeof(best));
}

void fp8_transpose(const Tensor& q, const Tensor& qt) {
  const int64_t rows = q.dim(0), cols = q.dim(1);
  const uint8_t* in = q.data_as<uint8_t>();
  uint8_t* out = qt.data_as<uint8_t>();
#pragma omp parallel for if (worth_parallel(rows * cols)) schedule(static)
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) out[c * rows + r] = in[r * cols + c];
}

void fp8_scales_update(const Tensor& amax_history, const Tensor& scale, const Tensor& scale_inv,
                       const Fp8ScalingParams& params) {
  const int64_t len = amax_history.dim(0), count = amax_history.dim(1);
  float* history = amax_history.data_as<float>();
  float* s = scale.data_as<float>();
  float* s_inv = scale_inv.data_as<float>();
  const int64_t inv_row = scale_inv.numel() / std::max<int64_t>(count, 1);
  for (int64_t t = 0; t < count; ++t) {
    float amax = history[t];
    if (params.amax_max)
      for (int64_t k = 1; k < len; ++k) amax = std::max(amax, history[k * count + t]);
    s[t] = fp8_scale_from_amax(amax, s[t], params.fp8_max, params.margin);
    s_inv[t * inv_row] = 1.0f / s[t];
    if (!params.roll_history) continue;
    for (int64_t k = len - 1; k > 0; --k) history[k * count + t] = history[(k - 1) * count + t];
    history[t] = 0.0f;
  }
}

}  // namespace troupe::cpu
