// Pointwise reference ops. add/scale_inplace are f32; convert reads and writes any of
// f32 / bf16 / f16 through the host conversions of half.hpp (round to nearest even).
#include <cstring>

#include "base/check.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/half.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

namespace {

// Calls f(read) with read(i) -> float, the i-th element of t.
template <typename F>
void with_reader(const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::f32: {
      const float* p = t.data_as<float>();
      f([p](int64_t i) { return p[i]; });
      return;
    }
    case DType::bf16: {
      const uint16_t* p = t.data_as<uint16_t>();
      f([p](int64_t i) { return bf16_bits_to_f32(p[i]); });
      return;
    }
    case DType::f16: {
      const uint16_t* p = t.data_as<uint16_t>();
      f([p](int64_t i) { return f16_bits_to_f32(p[i]); });
      return;
    }
    default:
      TROUPE_FAIL("convert: no CPU conversion from ", dtype_name(t.dtype()));
  }
}

// Calls f(write) with write(i, v) storing float v as the i-th element of t.
template <typename F>
void with_writer(const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::f32: {
      float* p = t.data_as<float>();
      f([p](int64_t i, float v) { p[i] = v; });
      return;
    }
    case DType::bf16: {
      uint16_t* p = t.data_as<uint16_t>();
      f([p](int64_t i, float v) { p[i] = f32_to_bf16_bits(v); });
      return;
    }
    case DType::f16: {
      uint16_t* p = t.data_as<uint16_t>();
      f([p](int64_t i, float v) { p[i] = f32_to_f16_bits(v); });
      return;
    }
    default:
      TROUPE_FAIL("convert: no CPU conversion to ", dtype_name(t.dtype()));
  }
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const float* pa = a.data_as<float>();
  const float* pb = b.data_as<float>();
  float* po = out.data_as<float>();  // may alias pa or pb: each element is read before it is written
  const int64_t n = a.numel();
#pragma omp parallel for if (worth_parallel(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

void scale_inplace(const Tensor& x, float s) {
  float* p = x.data_as<float>();
  const int64_t n = x.numel();
#pragma omp parallel for if (worth_parallel(n)) schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] *= s;
}

void convert(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) {  // a bit copy keeps NaN payloads and signed zeros
    if (src.data() != dst.data()) std::memmove(dst.data(), src.data(), src.nbytes());
    return;
  }
  const int64_t n = src.numel();
  with_reader(src, [&](auto read) {
    with_writer(dst, [&](auto write) {
#pragma omp parallel for if (worth_parallel(n)) schedule(static)
      for (int64_t i = 0; i < n; ++i) write(i, read(i));
    });
  });
}

}  // namespace troupe::cpu
