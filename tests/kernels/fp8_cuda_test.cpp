// CUDA FP8 ops against the CPU backend: casts and dequantization bit-exact (from bf16 and f32),
// amax exact (alone and folded into the casts), the byte transpose, the scale update, and the cuBLASLt FP8 GEMM on
// GPT-2 shapes in every allowed pair of formats (f32 output within 1e-5, bf16 within its rounding).
#include <cmath>

#include "kernels/fp8.hpp"
#include "kernels/fp8_gemm.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Host u8 -> device u8 and back.
Tensor bytes_to_device(const Tensor& host) {
  Tensor d = Tensor::empty(gpu(), DType::u8, host.shape());
  copy(gpu(), host, d);
  return d;
}
Tensor bytes_to_host(const Tensor& dev) {
  Tensor h = Tensor::host(DType::u8, dev.shape());
  copy(gpu(), dev, h);
  gpu().synchronize();
  return h;
}

int64_t byte_mismatches(const Tensor& a, const Tensor& b, Fp8Format f) {
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const uint8_t x = a.data_as<uint8_t>()[i], y = b.data_as<uint8_t>()[i];
    const bool both_nan = std::isnan(fp8_to_f32(x, f)) && std::isnan(fp8_to_f32(y, f));
    if (x != y && !both_nan && ++bad <= 5)
      ADD_FAILURE() << fp8_format_name(f) << " element " << i << ": cuda " << int(x) << ", cpu " << int(y);
  }
  return bad;
}

// Normal values over many binades plus the edge cases: saturation, infinities, NaN, zeros, ties.
Tensor cast_inputs(DType t, uint64_t seed) {
  Tensor x = random_normal({4096}, seed, 3.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.at(i) *= std::ldexp(1.0f, int(i % 40) - 20);
  const float specials[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e30f, -1e30f, 1.0625f, 1.1875f, 1e-30f};
  for (size_t i = 0; i < std::size(specials); ++i) x.at(int64_t(i)) = specials[i];
  return round_through(x, t);
}

TEST(Fp8Cuda, CastsAreBitExact) {
  for (DType t : {DType::bf16, DType::f32}) {
    for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      for (float s : {1.0f, 37.5f, 1.0f / 1024}) {
        const Tensor x = cast_inputs(t, 11);
        const Tensor scale = Tensor::host_f32({1}, {s});
        Tensor q_ref = Tensor::host(DType::u8, x.shape());
        fp8_cast(cpu(), x, scale, f, q_ref);
        Tensor q = Tensor::empty(gpu(), DType::u8, x.shape());
        fp8_cast(gpu(), to_device(gpu(), x, t), to_device(gpu(), scale, DType::f32), f, q);
        EXPECT_EQ(byte_mismatches(bytes_to_host(q), q_ref, f), 0) << dtype_name(t) << " scale " << s;

        // And back: value * scale_inv, f32 out, bit-exact too.
        const Tensor scale_inv = Tensor::host_f32({1}, {1.0f / s});
        Tensor y_ref = Tensor::host(DType::f32, x.shape());
        fp8_dequantize(cpu(), q_ref, f, scale_inv, y_ref);
        Tensor y = Tensor::empty(gpu(), DType::f32, x.shape());
        fp8_dequantize(gpu(), bytes_to_device(q_ref), f, to_device(gpu(), scale_inv, DType::f32), y);
        const Tensor y_host = to_host_f32(gpu(), y);
        int64_t bad = 0;
        for (int64_t i = 0; i < y.numel(); ++i) {
          const float a = y_host.at(i), b = y_ref.at(i);
          if (!(a == b || (std::isnan(a) && std::isnan(b)))) ++bad;
        }
        EXPECT_EQ(bad, 0) << "dequantize " << fp8_format_name(f);
      }
    }
  }
}

TEST(Fp8Cuda, AmaxIsExact) {
  for (DType t : {DType::bf16, DType::f32}) {
    for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1) << 20}) {
      const Tensor x = round_through(random_normal({n}, uint64_t(n), 2.0f), t);
      Tensor amax_ref = Tensor::host_f32({1}, {0.5f});
      fp8_amax(cpu(), x, amax_ref);
      Tensor amax = to_device(gpu(), Tensor::host_f32({1}, {0.5f}), DType::f32);
      fp8_amax(gpu(), to_device(gpu(), x, t), amax);
      EXPECT_EQ(to_host_f32(gpu(), amax).at(0), amax_ref.at(0)) << dtype_name(t) << " n " << n;
    }
  }
}

// The vectorized cast and amax also take views that start off a 16-byte boundary (their
// element-by-element path) and lengths that are not a multiple of 8 (the tail).
TEST(Fp8Cuda, CastAndAmaxOfUnalignedViewsMatchCpu) {
  const Tensor x = cast_inputs(DType::bf16, 12);
  const Tensor x_dev = to_device(gpu(), x, DType::bf16);
  for (int64_t offset : {0, 1, 3}) {
    const int64_t n = x.numel() - 8 - offset;  // never a multiple of 8 with offset 1 or 3
    const Tensor view = x.view({x.numel()}).slice(offset, {n}), view_dev = x_dev.view({x.numel()}).slice(offset, {n});
    Tensor q_ref = Tensor::host(DType::u8, {n});
    fp8_cast(cpu(), view, Tensor::host_f32({1}, {3.0f}), Fp8Format::e4m3, q_ref);
    Tensor q = Tensor::empty(gpu(), DType::u8, {n});
    fp8_cast(gpu(), view_dev, to_device(gpu(), Tensor::host_f32({1}, {3.0f}), DType::f32), Fp8Format::e4m3, q);
    EXPECT_EQ(byte_mismatches(bytes_to_host(q), q_ref, Fp8Format::e4m3), 0) << "offset " << offset;
    // amax over finite values (the specials sit in the first elements: skip them).
    const Tensor finite = x.view({x.numel()}).slice(16 + offset, {n - 16});
    Tensor amax_ref = Tensor::host_f32({1}, {0.0f});
    fp8_amax(cpu(), finite, amax_ref);
    Tensor amax = Tensor::zeros(gpu(), DType::f32, {1});
    fp8_amax(gpu(), x_dev.view({x.numel()}).slice(16 + offset, {n - 16}), amax);
    EXPECT_EQ(to_host_f32(gpu(), amax).at(0), amax_ref.at(0)) << "offset " << offset;
  }
}

// One pass: the cast written transposed (and as is) equals the CPU's cast then transpose, on
// whole tiles, partial tiles, and shapes the fused kernel leaves to the two-step path.
TEST(Fp8Cuda, CastTransposeMatchesCpu) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{64, 64}, {136, 200}, {1024, 768}, {37, 100}}) {
    for (DType t : {DType::bf16, DType::f16, DType::f32}) {
      for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
        const Tensor x = round_through(random_normal({r, c}, 13, 2.0f), t);
        const Tensor scale = Tensor::host_f32({1}, {5.0f});
        Tensor q_ref = Tensor::host(DType::u8, {r, c}), qt_ref = Tensor::host(DType::u8, {c, r});
        fp8_cast(cpu(), x, scale, f, q_ref);
        fp8_transpose(cpu(), q_ref, qt_ref);
        for (bool with_q : {true, false}) {
          Tensor q = with_q ? Tensor::empty(gpu(), DType::u8, {r, c}) : Tensor();
          Tensor qt = Tensor::empty(gpu(), DType::u8, {c, r});
          fp8_cast_transpose(gpu(), to_device(gpu(), x, t), to_device(gpu(), scale, DType::f32), f, q, qt);
          EXPECT_EQ(byte_mismatches(bytes_to_host(qt), qt_ref, f), 0)
              << r << "x" << c << " " << dtype_name(t) << " " << fp8_format_name(f);
          if (with_q) {
            EXPECT_EQ(byte_mismatches(bytes_to_host(q), q_ref, f), 0) << r << "x" << c;
          }
        }
      }
    }
  }
}

// Casts given an amax (delayed scaling records what it casts): the bytes of the cast without one,
// the amax of fp8_amax, both bit for bit on CUDA and as the CPU's; vectorized, element-by-element
// and one-pass transposed kernels (1024x768 16-bit), and the two-step paths (f32, 37x100).
TEST(Fp8Cuda, CastsFoldingTheAmaxMatchCpuAndTheSeparatePasses) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1024, 768}, {37, 100}}) {
    for (DType t : {DType::bf16, DType::f32}) {
      const Fp8Format f = Fp8Format::e5m2;
      const Tensor x = round_through(random_normal({r, c}, 51, 2.0f), t);
      const Tensor scale = Tensor::host_f32({1}, {5.0f}), start = Tensor::host_f32({1}, {0.5f});
      Tensor amax_ref = round_through(start, DType::f32);
      fp8_amax(cpu(), x, amax_ref);
      Tensor q_ref = Tensor::host(DType::u8, {r, c}), qt_ref = Tensor::host(DType::u8, {c, r});
      fp8_cast(cpu(), x, scale, f, q_ref);
      fp8_transpose(cpu(), q_ref, qt_ref);
      const Tensor xd = to_device(gpu(), x, t), sd = to_device(gpu(), scale, DType::f32);
      Tensor amax_two = to_device(gpu(), start, DType::f32), q_two = Tensor::empty(gpu(), DType::u8, {r, c});
      fp8_amax(gpu(), xd, amax_two);
      fp8_cast(gpu(), xd, sd, f, q_two);
      Tensor amax = to_device(gpu(), start, DType::f32), q = Tensor::empty(gpu(), DType::u8, {r, c});
      fp8_cast(gpu(), xd, sd, f, q, amax);
      Tensor amax_t = to_device(gpu(), start, DType::f32), q2 = Tensor::empty(gpu(), DType::u8, {r, c});
      Tensor qt = Tensor::empty(gpu(), DType::u8, {c, r});
      fp8_cast_transpose(gpu(), xd, sd, f, q2, qt, amax_t);
      const std::string what = str_cat(r, "x", c, " ", dtype_name(t));
      EXPECT_EQ(byte_mismatches(bytes_to_host(q), q_ref, f), 0) << what;
      EXPECT_EQ(byte_mismatches(bytes_to_host(q), bytes_to_host(q_two), f), 0) << what;
      EXPECT_EQ(byte_mismatches(bytes_to_host(q2), q_ref, f), 0) << what;
      EXPECT_EQ(byte_mismatches(bytes_to_host(qt), qt_ref, f), 0) << what;
      EXPECT_EQ(to_host_f32(gpu(), amax).at(0), amax_ref.at(0)) << what;
      EXPECT_EQ(to_host_f32(gpu(), amax_two).at(0), amax_ref.at(0)) << what;
      EXPECT_EQ(to_host_f32(gpu(), amax_t).at(0), amax_ref.at(0)) << what;
    }
  }
}

TEST(Fp8Cuda, TransposeMatchesCpu) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{37, 100}, {768, 2304}, {1, 33}}) {
    Tensor q = Tensor::host(DType::u8, {r, c});
    for (int64_t i = 0; i < q.numel(); ++i) q.data_as<uint8_t>()[i] = uint8_t(i * 7 + i / 255);
    Tensor qt_ref = Tensor::host(DType::u8, {c, r});
    fp8_transpose(cpu(), q, qt_ref);
    Tensor qt = Tensor::empty(gpu(), DType::u8, {c, r});
    fp8_transpose(gpu(), bytes_to_device(q), qt);
    EXPECT_EQ(byte_mismatches(bytes_to_host(qt), qt_ref, Fp8Format::e4m3), 0) << r << "x" << c;
  }
}

TEST(Fp8Cuda, ScalesUpdateMatchesCpu) {
  const int64_t len = 4, count = 300;
  Tensor history = random_uniform({len, count}, 5, 0.0f, 10.0f);
  for (int64_t t = 0; t < count; t += 7) history.at(t) = 0.0f;  // newest amax zero: scale stays
  history.at(1) = NAN;
  const Tensor scale0 = random_uniform({count}, 6, 0.5f, 2.0f);
  Tensor inv0 = Tensor::host(DType::f32, {count});
  for (int64_t t = 0; t < count; ++t) inv0.at(t) = 1.0f / scale0.at(t);
  for (bool amax_max : {false, true}) {
    const Fp8ScalingParams params{57344.0f, 2, amax_max, true};
    Tensor h_ref = round_through(history, DType::f32), s_ref = round_through(scale0, DType::f32);
    Tensor i_ref = round_through(inv0, DType::f32);
    fp8_scales_update(cpu(), h_ref, s_ref, i_ref, params);
    Tensor h = to_device(gpu(), history, DType::f32), s = to_device(gpu(), scale0, DType::f32);
    Tensor inv = to_device(gpu(), inv0, DType::f32);
    fp8_scales_update(gpu(), h, s, inv, params);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), s), s_ref), 0.0) << "amax_max " << amax_max;
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), inv), i_ref), 0.0);
    const Tensor h_host = to_host_f32(gpu(), h);
    for (int64_t i = 0; i < h_host.numel(); ++i)
      ASSERT_TRUE(h_host.at(i) == h_ref.at(i) || (std::isnan(h_host.at(i)) && std::isnan(h_ref.at(i)))) << i;
  }
}

struct GemmCase {
  int64_t m, k, n;
  Fp8Format fa, fb;
};

// Quantized operands with recipe-like scales (amax to the format's max), on both backends.
struct Fp8Pair {
  Fp8Operand cpu_a, cpu_b, gpu_a, gpu_b;
};

Fp8Operand quantize_host(const Tensor& x, Fp8Format f) {
  Tensor amax = Tensor::host_f32({1}, {0.0f});
  fp8_amax(cpu(), x, amax);
  const float s = fp8_max(f) / amax.at(0);
  Tensor q = Tensor::host(DType::u8, x.shape());
  fp8_cast(cpu(), x, Tensor::host_f32({1}, {s}), f, q);
  return {q, f, Tensor::host_f32({1}, {1.0f / s})};
}

Fp8Operand on_gpu(const Fp8Operand& x) {
  return {bytes_to_device(x.data), x.format, to_device(gpu(), x.scale_inv, DType::f32)};
}

TEST(Fp8Cuda, GemmMatchesCpu) {
  const GemmCase cases[] = {
      {512, 768, 2304, Fp8Format::e4m3, Fp8Format::e4m3},  // qkv forward
      {512, 3072, 768, Fp8Format::e4m3, Fp8Format::e4m3},  // fc2 forward
      {512, 2304, 768, Fp8Format::e5m2, Fp8Format::e4m3},  // qkv dgrad: dy x w^T
      {768, 512, 3072, Fp8Format::e5m2, Fp8Format::e4m3},  // fc1 wgrad: dy^T x x^T
      {256, 512, 768, Fp8Format::e4m3, Fp8Format::e5m2},
  };
  for (const GemmCase& c : cases) {
    const Fp8Operand a = quantize_host(random_normal({c.m, c.k}, 21), c.fa);
    const Fp8Operand b = quantize_host(random_normal({c.n, c.k}, 22, 0.02f), c.fb);
    const Tensor bias = round_through(random_normal({c.n}, 23), DType::bf16);
    // bf16 output with the bias epilogue.
    Tensor d_ref = Tensor::host(DType::f32, {c.m, c.n});
    fp8_gemm(cpu(), a, b, d_ref, 0.0f, bias);
    Tensor d = Tensor::empty(gpu(), DType::bf16, {c.m, c.n});
    fp8_gemm(gpu(), on_gpu(a), on_gpu(b), d, 0.0f, to_device(gpu(), bias, DType::bf16));
    const double bf16_err = rel_error(to_host_f32(gpu(), d), d_ref);
    // f32 output accumulating into d (weight gradients).
    const Tensor d0 = random_normal({c.m, c.n}, 24);
    Tensor acc_ref = round_through(d0, DType::f32);
    fp8_gemm(cpu(), a, b, acc_ref, 1.0f);
    Tensor acc = to_device(gpu(), d0, DType::f32);
    fp8_gemm(gpu(), on_gpu(a), on_gpu(b), acc, 1.0f);
    const double f32_err = rel_error(to_host_f32(gpu(), acc), acc_ref);
    std::printf("  %lldx%lldx%lld %s x %s: rel error bf16 %.2e, f32 accumulate %.2e\n", (long long)c.m, (long long)c.k,
                (long long)c.n, fp8_format_name(c.fa), fp8_format_name(c.fb), bf16_err, f32_err);
    EXPECT_LT(bf16_err, 5e-3);
    // Hopper's FP8 tensor cores accumulate with fewer bits than f32 between cuBLASLt's promotions
    // (measured on an H100: 4e-5 to 1e-4 over K = 768..3072).
    EXPECT_LT(f32_err, 2e-4);
  }
}

// The linears keep their scales in one [T, kFp8ScaleRow] table and pass one-element views of
// it (16-byte aligned), with operands that are views at the start of larger byte buffers.
TEST(Fp8Cuda, GemmTakesScalesAndOperandsAsViews) {
  const int64_t m = 512, k = 768, n = 768;
  const Fp8Operand a = quantize_host(random_normal({m, k}, 31), Fp8Format::e4m3);
  const Fp8Operand b = quantize_host(random_normal({n, k}, 32, 0.02f), Fp8Format::e4m3);
  Tensor ref = Tensor::host(DType::f32, {m, n});
  fp8_gemm(cpu(), a, b, ref, 0.0f);
  for (int64_t row : {0, 1, 3}) {
    const Tensor table = Tensor::zeros(gpu(), DType::f32, {4, kFp8ScaleRow});
    const Tensor sa = table.slice(row * kFp8ScaleRow, {1}), sb = table.slice((3 - row) * kFp8ScaleRow, {1});
    copy(gpu(), a.scale_inv, sa);
    copy(gpu(), b.scale_inv, sb);
    const Tensor a_buf = Tensor::empty(gpu(), DType::u8, {2 * m * k}),
                 b_buf = Tensor::empty(gpu(), DType::u8, {2 * n * k});
    const Tensor a_view = a_buf.slice(0, {m, k}), b_view = b_buf.slice(0, {n, k});
    copy(gpu(), a.data, a_view);
    copy(gpu(), b.data, b_view);
    Tensor d = Tensor::empty(gpu(), DType::bf16, {m, n});
    fp8_gemm(gpu(), {a_view, a.format, sa}, {b_view, b.format, sb}, d);
    const double err = rel_error(to_host_f32(gpu(), d), ref);
    std::printf("  scales at rows %lld and %lld: rel error %.2e\n", (long long)row, (long long)(3 - row), err);
    EXPECT_LT(err, 5e-3);
  }
}

TEST(Fp8Cuda, GemmRefusesWhatCublasLtCannotRun) {
  const Fp8Operand a = on_gpu(quantize_host(random_normal({32, 32}, 1), Fp8Format::e5m2));
  Tensor d = Tensor::empty(gpu(), DType::bf16, {32, 32});
  EXPECT_THROW(fp8_gemm(gpu(), a, a, d), Error);  // e5m2 x e5m2
  const Fp8Operand odd = on_gpu(quantize_host(random_normal({32, 40}, 2), Fp8Format::e4m3));
  EXPECT_THROW(fp8_gemm(gpu(), odd, odd, d), Error);  // K = 40
}

}  // namespace
}  // namespace troupe::test
