// CPU add / scale_inplace / convert against known values.
#include <cmath>
#include <limits>
#include <string>

#include "kernels/elementwise.hpp"
#include "kernels/half.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

TEST(Elementwise, AddKnownValues) {
  Tensor a = Tensor::host_f32({2, 2}, {1, 2, 3, 4}), b = Tensor::host_f32({2, 2}, {10, 20, 30, -4});
  Tensor out = Tensor::host(DType::f32, {2, 2});
  add(cpu(), a, b, out);
  const float want[4] = {11, 22, 33, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.at(i), want[i]) << "out[" << i << "]";
}

TEST(Elementwise, AddIntoAnInput) {  // the residual connection: x = x + f(x)
  Tensor a = Tensor::host_f32({3}, {1, 2, 3}), b = Tensor::host_f32({3}, {0.5f, 0.25f, -3});
  add(cpu(), a, b, a);
  EXPECT_EQ(a.at(0), 1.5f);
  EXPECT_EQ(a.at(1), 2.25f);
  EXPECT_EQ(a.at(2), 0.0f);
  add(cpu(), a, b, b);
  EXPECT_EQ(b.at(0), 2.0f);
  EXPECT_EQ(b.at(2), -3.0f);
}

TEST(Elementwise, ScaleInplaceKnownValues) {
  Tensor x = Tensor::host_f32({4}, {1, -2, 0.5f, 0});
  scale_inplace(cpu(), x, -4.0f);
  EXPECT_EQ(x.at(0), -4.0f);
  EXPECT_EQ(x.at(1), 8.0f);
  EXPECT_EQ(x.at(2), -2.0f);
  EXPECT_EQ(x.at(3), 0.0f);
}

// Values at and around rounding ties, an overflow and a subnormal, for both 16-bit types.
Tensor conversion_probe() {
  return Tensor::host_f32({8}, {1.0f + 0x1p-8f,      // bf16 tie: rounds down to even 1.0
                                1.0f + 3 * 0x1p-8f,  // bf16 tie: rounds up to even 1 + 2^-6
                                1.0f + 0x1p-11f,     // f16 tie: rounds down to 1.0
                                -65520.0f,           // f16 overflow: -inf
                                1e-7f,               // f16 subnormal
                                3.14159265f, -0.0f, 1e30f});
}

TEST(Elementwise, ConvertRoundsToNearestEven) {
  const Tensor x = conversion_probe();
  Tensor bf = Tensor::host(DType::bf16, x.shape()), h = Tensor::host(DType::f16, x.shape());
  convert(cpu(), x, bf);
  convert(cpu(), x, h);
  EXPECT_EQ(bf16_bits_to_f32(bf.data_as<uint16_t>()[0]), 1.0f);
  EXPECT_EQ(bf16_bits_to_f32(bf.data_as<uint16_t>()[1]), 1.0f + 0x1p-6f);
  EXPECT_EQ(f16_bits_to_f32(h.data_as<uint16_t>()[2]), 1.0f);
  EXPECT_EQ(f16_bits_to_f32(h.data_as<uint16_t>()[3]), -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(bf.data_as<uint16_t>()[i], f32_to_bf16_bits(x.at(i))) << "bf16[" << i << "]";
    EXPECT_EQ(h.data_as<uint16_t>()[i], f32_to_f16_bits(x.at(i))) << "f16[" << i << "]";
  }

  // Back to f32 is exact; bf16 -> f16 rounds once, from the exact bf16 value.
  Tensor back = Tensor::host(DType::f32, x.shape()), h_from_bf = Tensor::host(DType::f16, x.shape());
  convert(cpu(), bf, back);
  convert(cpu(), bf, h_from_bf);
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(back.at(i), round_to_bf16(x.at(i))) << "f32[" << i << "]";
    EXPECT_EQ(h_from_bf.data_as<uint16_t>()[i], f32_to_f16_bits(round_to_bf16(x.at(i)))) << "f16[" << i << "]";
  }

  Tensor same = Tensor::host(DType::f32, {2, 4});  // same dtype: a copy (any shape, same numel)
  convert(cpu(), x, same);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(same.at(i), x.at(i));
}

TEST(Elementwise, BadArgumentsAreErrors) {
  Tensor a = Tensor::host(DType::f32, {4}), b = Tensor::host(DType::f32, {5});
  EXPECT_THROW(add(cpu(), a, b, a), Error);
  EXPECT_THROW(
      add(cpu(), Tensor::host(DType::bf16, {4}), Tensor::host(DType::bf16, {4}), Tensor::host(DType::bf16, {4})),
      Error);  // the CPU backend computes in f32
  EXPECT_THROW(scale_inplace(cpu(), Tensor::host(DType::i32, {4}), 2.0f), Error);
  EXPECT_THROW(convert(cpu(), a, b), Error);                              // numel differs
  EXPECT_THROW(convert(cpu(), a, Tensor::host(DType::i32, {4})), Error);  // not a float type
}

TEST(CopyColumns, ColumnsLandInPlaceAndTheRestIsUntouched) {
  Tensor src = Tensor::host(DType::f32, {3, 5}), dst = Tensor::host(DType::f32, {3, 8});
  for (int64_t i = 0; i < src.numel(); ++i) src.at(i) = float(i);
  for (int64_t i = 0; i < dst.numel(); ++i) dst.at(i) = -1.0f;
  copy_columns(cpu(), src, 1, dst, 4, 3);  // src columns 1..3 -> dst columns 4..6
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 8; ++c)
      EXPECT_EQ(dst.at(r * 8 + c), c >= 4 && c < 7 ? float(r * 5 + c - 3) : -1.0f) << "row " << r << " column " << c;
  EXPECT_THROW(copy_columns(cpu(), src, 3, dst, 0, 3), Error);                               // past src's columns
  EXPECT_THROW(copy_columns(cpu(), src, 0, dst, 6, 3), Error);                               // past dst's columns
  EXPECT_THROW(copy_columns(cpu(), src, 0, Tensor::host(DType::f32, {2, 8}), 0, 1), Error);  // rows differ
  EXPECT_THROW(copy_columns(cpu(), src, 0, Tensor::host(DType::i32, {3, 8}), 0, 1), Error);  // dtypes differ
}

}  // namespace
}  // namespace troupe::test
