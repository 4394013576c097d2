// Host fp8 conversions: round to nearest even with saturation to the largest finite value, on
// f32 bits, matching cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.hpp"
#include "kernels/fp8.hpp"

namespace troupe {

namespace {

struct Fp8Layout {
  int mantissa_bits;
  int bias;
  float max;                 // largest finite value
  float saturate_threshold;  // |x| >= this becomes +-max: max plus half its ulp
  uint8_t max_bits;
};

Fp8Layout layout_of(Fp8Format f) {
  // e4m3: max 1.75 * 2^8 with ulp 2^5; e5m2: max 1.75 * 2^15 with ulp 2^13. For e4m3 the tie at
  // the threshold rounds to even (down to max) anyway; for e5m2 it would round up to infinity,
  // which saturation turns into max, so both saturate from the threshold on.
  if (f == Fp8Format::e4m3) return {3, 7, 448.0f, 464.0f, 0x7E};
  return {2, 15, 57344.0f, 61440.0f, 0x7B};
}

}  // namespace

float fp8_max(Fp8Format f) { return layout_of(f).max; }

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

uint8_t fp8_from_f32(float x, Fp8Format f) {
  const Fp8Layout l = layout_of(f);
  uint32_t xbits = 0;
  std::memcpy(&xbits, &x, sizeof(x));
  const uint8_t sign = uint8_t((xbits >> 31) << 7);
  const float a = std::fabs(x);
  if (std::isnan(a)) return uint8_t(sign | 0x7F);  // a NaN in both formats
  if (a >= l.saturate_threshold) return uint8_t(sign | l.max_bits);
  if (a == 0.0f) return sign;
  // The value's binade, or the subnormal one; the quantum (ulp) there is 2^(e - mantissa_bits).
  const int min_exponent = 1 - l.bias;
  const int e = std::max(std::ilogb(a), min_exponent);
  // a / quantum is exact (a power-of-two scaling of an f32 that stays normal); nearbyint rounds
  // to nearest even in the default rounding mode.
  const float units = std::nearbyint(std::ldexp(a, l.mantissa_bits - e));
  // Normal: exponent field e + bias, mantissa units - 2^mantissa_bits; a carry to
  // 2^(mantissa_bits + 1) units lands on the next binade's code by itself. Subnormal: the code
  // is the units, and 2^mantissa_bits units are the smallest normal.
  const int code = std::ilogb(a) < min_exponent
                       ? int(units)
                       : ((e + l.bias) << l.mantissa_bits) + int(units) - (1 << l.mantissa_bits);
  return uint8_t(sign | code);
}

float fp8_to_f32(uint8_t bits, Fp8Format f) {
  const Fp8Layout l = layout_of(f);
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exponent_field = (bits & 0x7F) >> l.mantissa_bits;
  const int mantissa = bits & ((1 << l.mantissa_bits) - 1);
  const int exponent_all_ones = (1 << (7 - l.mantissa_bits)) - 1;
  if (f == Fp8Format::e4m3 && (bits & 0x7F) == 0x7F) return NAN;
  if (f == Fp8Format::e5m2 && exponent_field == exponent_all_ones) return mantissa == 0 ? sign * INFINITY : NAN;
  if (exponent_field == 0) return sign * std::ldexp(float(mantissa), 1 - l.bias - l.mantissa_bits);
  return sign * std::ldexp(float(mantissa + (1 << l.mantissa_bits)), exponent_field - l.bias - l.mantissa_bits);
}

}  // namespace troupe
