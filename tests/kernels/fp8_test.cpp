// FP8 reference ops on the CPU: the casts against hand-checked codes (ties to even, subnormals,
// saturation, NaN) and, where the CUDA toolkit is installed, against cuda_fp8.h's own host
// conversion over a sweep of f32 values; amax, transpose, the scale update and the FP8 GEMM.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/fp8.hpp"
#include "kernels/fp8_gemm.hpp"
#include "tests/test_util.hpp"

#if TROUPE_HAVE_CUDA
#include <cuda_fp8.h>
#endif

namespace troupe::test {
namespace {

struct Code {
  float x;
  uint8_t bits;
};

void expect_codes(Fp8Format f, const std::vector<Code>& codes) {
  for (const Code& c : codes) EXPECT_EQ(int(fp8_from_f32(c.x, f)), int(c.bits)) << fp8_format_name(f) << " of " << c.x;
}

TEST(Fp8, E4m3HandCheckedCodes) {
  const float sub = std::ldexp(1.0f, -9);  // smallest subnormal
  expect_codes(Fp8Format::e4m3, {
                                    {1.0f, 0x38},
                                    {-1.0f, 0xB8},
                                    {0.0f, 0x00},
                                    {-0.0f, 0x80},
                                    {1.0625f, 0x38},  // tie between 1 and 1.125: even mantissa 0
                                    {1.1875f, 0x3A},  // tie between 1.125 and 1.25: even mantissa 2
                                    {1.0626f, 0x39},  // just above the tie
                                    {448.0f, 0x7E},
                                    {463.9f, 0x7E},
                                    {464.0f, 0x7E},  // max + half ulp: saturates
                                    {1e6f, 0x7E},
                                    {-1e6f, 0xFE},
                                    {INFINITY, 0x7E},
                                    {-INFINITY, 0xFE},
                                    {sub, 0x01},
                                    {sub / 2, 0x00},           // tie with zero: even
                                    {sub / 2 * 1.001f, 0x01},  // above it
                                    {1.5f * sub, 0x02},        // tie between 1 and 2 units
                                    {2.5f * sub, 0x02},        // tie between 2 and 3 units
                                    {7.0f * sub, 0x07},        // largest subnormal
                                    {7.5f * sub, 0x08},        // tie: up to the smallest normal
                                    {std::ldexp(1.0f, -6), 0x08},
                                    {1e-30f, 0x00},
                                    {-1e-30f, 0x80},
                                });
  EXPECT_TRUE(std::isnan(fp8_to_f32(fp8_from_f32(NAN, Fp8Format::e4m3), Fp8Format::e4m3)));
  EXPECT_TRUE(std::isnan(fp8_to_f32(fp8_from_f32(-NAN, Fp8Format::e4m3), Fp8Format::e4m3)));
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x7F, Fp8Format::e4m3)));
  EXPECT_TRUE(std::isnan(fp8_to_f32(0xFF, Fp8Format::e4m3)));
  EXPECT_EQ(fp8_to_f32(0x7E, Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_to_f32(0x01, Fp8Format::e4m3), sub);
  EXPECT_EQ(fp8_to_f32(0xB8, Fp8Format::e4m3), -1.0f);
  EXPECT_EQ(fp8_max(Fp8Format::e4m3), 448.0f);
}

TEST(Fp8, E5m2HandCheckedCodes) {
  const float sub = std::ldexp(1.0f, -16);
  expect_codes(Fp8Format::e5m2, {
                                    {1.0f, 0x3C},
                                    {-2.0f, 0xC0},
                                    {1.125f, 0x3C},  // tie between 1 and 1.25: even
                                    {1.375f, 0x3E},  // tie between 1.25 and 1.5: even
                                    {57344.0f, 0x7B},
                                    {60000.0f, 0x7B},
                                    {61440.0f, 0x7B},  // the tie would round to infinity: saturates
                                    {1e9f, 0x7B},
                                    {INFINITY, 0x7B},
                                    {-INFINITY, 0xFB},
                                    {sub, 0x01},
                                    {sub / 2, 0x00},
                                    {1.5f * sub, 0x02},
                                    {3.5f * sub, 0x04},  // tie between the largest subnormal and 2^-14
                                    {std::ldexp(1.0f, -14), 0x04},
                                });
  EXPECT_TRUE(std::isnan(fp8_to_f32(fp8_from_f32(NAN, Fp8Format::e5m2), Fp8Format::e5m2)));
  EXPECT_EQ(fp8_to_f32(0x7C, Fp8Format::e5m2), INFINITY);
  EXPECT_EQ(fp8_to_f32(0xFC, Fp8Format::e5m2), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x7D, Fp8Format::e5m2)));
  EXPECT_EQ(fp8_to_f32(0x7B, Fp8Format::e5m2), 57344.0f);
  EXPECT_EQ(fp8_max(Fp8Format::e5m2), 57344.0f);
}

TEST(Fp8, EveryCodeRoundTrips) {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (int b = 0; b < 256; ++b) {
      const float v = fp8_to_f32(uint8_t(b), f);
      if (std::isnan(v) || std::isinf(v)) continue;
      EXPECT_EQ(int(fp8_from_f32(v, f)), b) << fp8_format_name(f) << " code " << b;
    }
  }
}

#if TROUPE_HAVE_CUDA
// cuda_fp8.h's host path (the same rounding its device path does in hardware) over f32 values
// from 2^-40 to 2^40: at every 256th mantissa, its neighbours, so every tie and the values either
// side of it. NaN only as NaN (the payload bits differ between implementations).
TEST(Fp8, MatchesCudaFp8HostConversion) {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const auto interp = f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
    int64_t checked = 0, mismatches = 0;
    for (uint32_t exponent = 87; exponent <= 167; ++exponent) {
      for (uint32_t m = 0; m < (1u << 23); m += 256) {
        for (uint32_t dm : {0u, 1u, 255u}) {
          for (uint32_t sign : {0u, 1u}) {
            const uint32_t bits = (sign << 31) | (exponent << 23) | (m + dm);
            float x = 0.0f;
            std::memcpy(&x, &bits, sizeof(x));
            const uint8_t ours = fp8_from_f32(x, f), theirs = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, interp);
            ++checked;
            if (ours != theirs && ++mismatches <= 5)
              ADD_FAILURE() << fp8_format_name(f) << ": " << x << " -> ours " << int(ours) << ", cuda_fp8.h "
                            << int(theirs);
          }
        }
      }
    }
    for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, -1e-45f, 3e38f})
      EXPECT_EQ(fp8_from_f32(x, f), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, interp)) << x;
    EXPECT_EQ(mismatches, 0) << "of " << checked;
  }
}
#endif

TEST(Fp8, CastAndDequantizeApplyTheScale) {
  const Tensor x = Tensor::host_f32({4}, {1.0f, -3.0f, 0.01f, 1000.0f});
  const Tensor scale = Tensor::host_f32({1}, {4.0f}), scale_inv = Tensor::host_f32({1}, {0.25f});
  Tensor q = Tensor::host(DType::u8, {4}), y = Tensor::host(DType::f32, {4});
  fp8_cast(cpu(), x, scale, Fp8Format::e4m3, q);
  const uint8_t* b = q.data_as<uint8_t>();
  EXPECT_EQ(int(b[0]), int(fp8_from_f32(4.0f, Fp8Format::e4m3)));
  EXPECT_EQ(int(b[1]), int(fp8_from_f32(-12.0f, Fp8Format::e4m3)));
  EXPECT_EQ(int(b[2]), int(fp8_from_f32(0.04f, Fp8Format::e4m3)));
  EXPECT_EQ(int(b[3]), 0x7E);  // 4000 saturates to 448
  fp8_dequantize(cpu(), q, Fp8Format::e4m3, scale_inv, y);
  EXPECT_EQ(y.at(0), 1.0f);
  EXPECT_EQ(y.at(1), -3.0f);
  EXPECT_EQ(y.at(3), 112.0f);
  EXPECT_NEAR(y.at(2), 0.01f, 0.01f / 16);
}

TEST(Fp8, AmaxAccumulatesTheLargestMagnitude) {
  const Tensor x = Tensor::host_f32({5}, {0.5f, -7.25f, 3.0f, -0.0f, 6.0f});
  Tensor amax = Tensor::host_f32({1}, {0.0f});
  fp8_amax(cpu(), x, amax);
  EXPECT_EQ(amax.at(0), 7.25f);
  fp8_amax(cpu(), Tensor::host_f32({2}, {1.0f, 2.0f}), amax);  // keeps the larger earlier value
  EXPECT_EQ(amax.at(0), 7.25f);
  fp8_amax(cpu(), Tensor::host_f32({2}, {-9.5f, 2.0f}), amax);
  EXPECT_EQ(amax.at(0), 9.5f);
  fp8_amax(cpu(), Tensor::host_f32({2}, {NAN, 2.0f}), amax);
  EXPECT_TRUE(std::isnan(amax.at(0)));
}

TEST(Fp8, TransposeMovesBytes) {
  Tensor q = Tensor::host(DType::u8, {3, 5}), qt = Tensor::host(DType::u8, {5, 3});
  for (int i = 0; i < 15; ++i) q.data_as<uint8_t>()[i] = uint8_t(i);
  fp8_transpose(cpu(), q, qt);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(qt.data_as<uint8_t>()[c * 3 + r], r * 5 + c);
}

TEST(Fp8, CastTransposeIsTheCastTransposed) {
  const Tensor x = random_normal({5, 7}, 3, 4.0f), scale = Tensor::host_f32({1}, {2.0f});
  Tensor q_ref = Tensor::host(DType::u8, {5, 7}), qt_ref = Tensor::host(DType::u8, {7, 5});
  fp8_cast(cpu(), x, scale, Fp8Format::e5m2, q_ref);
  fp8_transpose(cpu(), q_ref, qt_ref);
  Tensor q = Tensor::host(DType::u8, {5, 7}), qt = Tensor::host(DType::u8, {7, 5});
  fp8_cast_transpose(cpu(), x, scale, Fp8Format::e5m2, q, qt);
  for (int64_t i = 0; i < 35; ++i) {
    EXPECT_EQ(q.data_as<uint8_t>()[i], q_ref.data_as<uint8_t>()[i]) << i;
    EXPECT_EQ(qt.data_as<uint8_t>()[i], qt_ref.data_as<uint8_t>()[i]) << i;
  }
  Tensor qt_only = Tensor::host(DType::u8, {7, 5});
  fp8_cast_transpose(cpu(), x, scale, Fp8Format::e5m2, Tensor(), qt_only);
  for (int64_t i = 0; i < 35; ++i) EXPECT_EQ(qt_only.data_as<uint8_t>()[i], qt_ref.data_as<uint8_t>()[i]) << i;
  EXPECT_THROW(fp8_cast_transpose(cpu(), x, scale, Fp8Format::e5m2, Tensor(), Tensor::host(DType::u8, {5, 7})), Error);
}

// Given an amax, the cast (and the cast-transpose) also folds max |x| into it: the same as
// fp8_amax, with the same bytes as the cast without one.
TEST(Fp8, CastsGivenAnAmaxFoldMaxAbsXIntoIt) {
  const Tensor x = random_normal({6, 8}, 4, 3.0f), scale = Tensor::host_f32({1}, {16.0f});
  Tensor amax_ref = Tensor::host_f32({1}, {0.25f});
  fp8_amax(cpu(), x, amax_ref);
  ASSERT_GT(amax_ref.at(0), 0.25f);
  Tensor q_ref = Tensor::host(DType::u8, {6, 8}), qt_ref = Tensor::host(DType::u8, {8, 6});
  fp8_cast(cpu(), x, scale, Fp8Format::e4m3, q_ref);
  fp8_transpose(cpu(), q_ref, qt_ref);
  Tensor q = Tensor::host(DType::u8, {6, 8}), qt = Tensor::host(DType::u8, {8, 6});
  Tensor amax = Tensor::host_f32({1}, {0.25f}), amax_t = Tensor::host_f32({1}, {0.25f});
  fp8_cast(cpu(), x, scale, Fp8Format::e4m3, q, amax);
  fp8_cast_transpose(cpu(), x, scale, Fp8Format::e4m3, Tensor(), qt, amax_t);
  EXPECT_EQ(amax.at(0), amax_ref.at(0));
  EXPECT_EQ(amax_t.at(0), amax_ref.at(0));
  for (int64_t i = 0; i < 48; ++i) {
    EXPECT_EQ(q.data_as<uint8_t>()[i], q_ref.data_as<uint8_t>()[i]) << i;
    EXPECT_EQ(qt.data_as<uint8_t>()[i], qt_ref.data_as<uint8_t>()[i]) << i;
  }
  EXPECT_THROW(fp8_cast(cpu(), x, scale, Fp8Format::e4m3, q, Tensor::host_f32({2}, {0.0f, 0.0f})), Error);
}

TEST(Fp8, ScalesFollowTheAmaxHistory) {
  // Two tensors, a history of 3 steps: tensor 0 saw amaxes 2 (newest), 8, 1; tensor 1 only zeros.
  const Tensor history = Tensor::host_f32({3, 2}, {2.0f, 0.0f, 8.0f, 0.0f, 1.0f, 0.0f});
  const Tensor scale = Tensor::host_f32({2}, {1.0f, 3.0f}), scale_inv = Tensor::host_f32({2}, {1.0f, 1.0f / 3});
  fp8_scales_update(cpu(), history, scale, scale_inv, {448.0f, 1, /*amax_max=*/false, /*roll=*/false});
  EXPECT_EQ(scale.at(0), 112.0f);  // 448 / 2 / 2^1
  EXPECT_EQ(scale_inv.at(0), 1.0f / 112.0f);
  EXPECT_EQ(scale.at(1), 3.0f);  // amax 0: the scale stays
  fp8_scales_update(cpu(), history, scale, scale_inv, {448.0f, 1, /*amax_max=*/true, /*roll=*/true});
  EXPECT_EQ(scale.at(0), 28.0f);  // 448 / 8 / 2
  // Rolled: one step older each, the newest row zero.
  const std::vector<float> rolled = {0.0f, 0.0f, 2.0f, 0.0f, 8.0f, 0.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(history.at(i), rolled[size_t(i)]) << i;
  // A non-finite amax keeps the scale; a tiny one is held at FLT_MAX.
  const Tensor odd = Tensor::host_f32({1, 2}, {INFINITY, 1e-39f});
  fp8_scales_update(cpu(), odd, scale, scale_inv, {57344.0f, 0, false, false});
  EXPECT_EQ(scale.at(0), 28.0f);
  EXPECT_EQ(scale.at(1), FLT_MAX);
}

// The GEMMs' table of inverse scales: [T, kFp8ScaleRow], scale t's inverse at row t's start,
// the rest of each row untouched.
TEST(Fp8, ScalesUpdateFillsColumnZeroOfATable) {
  const Tensor history = Tensor::host_f32({1, 2}, {2.0f, 4.0f});
  const Tensor scale = Tensor::host_f32({2}, {1.0f, 1.0f});
  Tensor table = Tensor::host_f32({2, kFp8ScaleRow}, std::vector<float>(size_t(2 * kFp8ScaleRow), -7.0f));
  fp8_scales_update(cpu(), history, scale, table, {448.0f, 0, false, false});
  for (int64_t t = 0; t < 2; ++t) {
    EXPECT_EQ(table.at(t * kFp8ScaleRow), 1.0f / scale.at(t)) << t;
    for (int64_t c = 1; c < kFp8ScaleRow; ++c) EXPECT_EQ(table.at(t * kFp8ScaleRow + c), -7.0f) << t << "," << c;
  }
  EXPECT_THROW(fp8_scales_update(cpu(), history, scale, Tensor::host_f32({3}, {1, 1, 1}), {}), Error);
}

// cuBLASLt reads FP8 scales only at 16-byte aligned addresses; every backend refuses others.
TEST(Fp8, GemmRefusesAScaleThatIsNotSixteenByteAligned) {
  const Tensor q = Tensor::zeros(cpu(), DType::u8, {16, 16});
  const Tensor table = Tensor::host_f32({2, kFp8ScaleRow}, std::vector<float>(size_t(2 * kFp8ScaleRow), 1.0f));
  Tensor d = Tensor::host(DType::f32, {16, 16});
  const Fp8Operand aligned{q, Fp8Format::e4m3, table.slice(kFp8ScaleRow, {1})};
  EXPECT_NO_THROW(fp8_gemm(cpu(), aligned, aligned, d));
  const Fp8Operand off{q, Fp8Format::e4m3, table.slice(1, {1})};
  EXPECT_THROW(fp8_gemm(cpu(), off, aligned, d), Error);
  EXPECT_THROW(fp8_gemm(cpu(), aligned, off, d), Error);
}

TEST(Fp8, GemmIsTheScaledProductOfTheFp8Values) {
  const int64_t m = 16, k = 32, n = 48;
  const Tensor xa = random_normal({m, k}, 1), xb = random_normal({n, k}, 2), bias = random_normal({n}, 3);
  const Tensor sa = Tensor::host_f32({1}, {8.0f}), sb = Tensor::host_f32({1}, {3.0f});
  const Tensor sa_inv = Tensor::host_f32({1}, {1.0f / 8}), sb_inv = Tensor::host_f32({1}, {1.0f / 3});
  Tensor qa = Tensor::host(DType::u8, {m, k}), qb = Tensor::host(DType::u8, {n, k});
  fp8_cast(cpu(), xa, sa, Fp8Format::e4m3, qa);
  fp8_cast(cpu(), xb, sb, Fp8Format::e5m2, qb);
  Tensor d = Tensor::host(DType::f32, {m, n});
  fp8_gemm(cpu(), {qa, Fp8Format::e4m3, sa_inv}, {qb, Fp8Format::e5m2, sb_inv}, d, 0.0f, bias);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i)
        acc += double(fp8_to_f32(qa.data_as<uint8_t>()[r * k + i], Fp8Format::e4m3)) *
               fp8_to_f32(qb.data_as<uint8_t>()[c * k + i], Fp8Format::e5m2);
      const double want = acc / 24.0 + bias.at(c);
      EXPECT_NEAR(d.at(r * n + c), want, 1e-5 * (1 + std::fabs(want)));
    }
  }
  EXPECT_THROW(
      fp8_gemm(cpu(), {qb, Fp8Format::e5m2, sb_inv}, {qb, Fp8Format::e5m2, sb_inv}, Tensor::host(DType::f32, {n, n})),
      Error);
}

}  // namespace
}  // namespace troupe::test
