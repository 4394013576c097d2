#include "kernels/half.hpp"

#include <cmath>

namespace troupe {

uint16_t f32_to_f16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {                                  // subnormal or zero in f16
    const float a = std::fabs(f) * 16777216.0f;              // 2^24: one f16 subnormal ulp = 2^-24
    return uint16_t(sign | uint32_t(std::nearbyint(a)));
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(float(mant), -24);
    return sign ? -out : out;
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  std::memcpy(&out, &u, 4);
  return out;
}

}  // namespace troupe
