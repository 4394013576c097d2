// Philox known answers, and CPU dropout: the exact mask of the word stream, statistics, offsets.
#include <cmath>

#include "kernels/dropout.hpp"
#include "kernels/philox.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

void expect_words(const PhiloxWords& r, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  EXPECT_EQ(r.w[0], w0);
  EXPECT_EQ(r.w[1], w1);
  EXPECT_EQ(r.w[2], w2);
  EXPECT_EQ(r.w[3], w3);
}

// Random123's kat_vectors for philox4x32-10 (counter words, key words -> output words); the
// values were also reproduced by an independent Python implementation.
TEST(Philox, Random123KnownAnswers) {
  expect_words(philox4x32_10(PhiloxWords{{0, 0, 0, 0}}, 0, 0), 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
  expect_words(philox4x32_10(PhiloxWords{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff),
               0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
  expect_words(philox4x32_10(PhiloxWords{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
               0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1);
}

constexpr uint64_t kSeed = 0x123456789abcdef0ull;

// 64-bit counter and key split into (low, high) words; values from the Python implementation.
TEST(Philox, SixtyFourBitCounterAndKey) {
  expect_words(philox4x32_10(0, kSeed), 0x092c9b44, 0x78384bc0, 0xc9fb80be, 0x2b3be4dd);
  expect_words(philox4x32_10(5, kSeed), 0x6e774984, 0xbd12799e, 0xe50d5f10, 0x28d3e2a7);
  EXPECT_EQ(philox_uniform(0xffffffffu), 16777215.0f / 16777216.0f);
  EXPECT_EQ(philox_uniform(0x000000ffu), 0.0f);
}

Tensor ones(int64_t n) { return Tensor::host_f32({n}, std::vector<float>(size_t(n), 1.0f)); }

// With p = 0.5 an element survives iff the top bit of its word is set. Counter 0's words keep
// only element 2, counter 1's (389d999a 609cf517 0570bb00 99b16edc) only element 7.
TEST(Dropout, MaskFollowsThePhiloxWordStream) {
  Tensor y = Tensor::host(DType::f32, {8});
  dropout_forward(cpu(), ones(8), y, 0.5f, kSeed, 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y.at(i), i == 2 || i == 7 ? 2.0f : 0.0f) << i;
  // Offset 21 starts at word 1 of counter 5: bd12799e, e50d5f10 keep; 28d3e2a7 drops.
  Tensor z = Tensor::host(DType::f32, {3});
  dropout_forward(cpu(), ones(3), z, 0.5f, kSeed, 21);
  EXPECT_EQ(z.at(0), 2.0f);
  EXPECT_EQ(z.at(1), 2.0f);
  EXPECT_EQ(z.at(2), 0.0f);
}

TEST(Dropout, KeepsAboutOneMinusPAndScalesTheKept) {
  const int64_t n = 200000;
  Tensor x = random_normal({n}, 5);
  Tensor y = Tensor::host(DType::f32, {n});
  for (float p : {0.1f, 0.5f}) {
    dropout_forward(cpu(), x, y, p, 7, 0);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (y.at(i) == 0.0f) continue;
      ++kept;
      ASSERT_EQ(y.at(i), x.at(i) * (1.0f / (1.0f - p))) << i;
    }
    // The standard deviation of the kept fraction is ~0.0011 here.
    EXPECT_NEAR(double(kept) / n, 1.0 - p, 0.005) << "p = " << p;
  }
}

// Element i of a call draws word offset + i: a call on x[k:] with offset + k continues the stream.
TEST(Dropout, OffsetContinuesTheStream) {
  const int64_t n = 103;
  Tensor x = random_normal({n}, 6);
  Tensor full = Tensor::host(DType::f32, {n});
  dropout_forward(cpu(), x, full, 0.3f, 99, 10);
  for (int64_t k : {1, 2, 3, 5, 64}) {
    Tensor part = Tensor::host(DType::f32, {n - k});
    dropout_forward(cpu(), x.slice(k, {n - k}), part, 0.3f, 99, 10 + k);
    EXPECT_EQ(max_abs_diff(part, full.slice(k, {n - k})), 0.0) << "k = " << k;
  }
  Tensor other_seed = Tensor::host(DType::f32, {n});
  dropout_forward(cpu(), x, other_seed, 0.3f, 100, 10);
  EXPECT_GT(max_abs_diff(other_seed, full), 0.0);
}

TEST(Dropout, BackwardAppliesTheForwardMask) {
  const int64_t n = 1000;
  const float p = 0.25f;
  Tensor x = ones(n), y = Tensor::host(DType::f32, {n});
  dropout_forward(cpu(), x, y, p, 3, 17);
  Tensor dy = random_normal({n}, 8);
  Tensor dx = Tensor::host(DType::f32, {n});
  dropout_backward(cpu(), dy, dx, p, 3, 17);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dx.at(i), y.at(i) == 0.0f ? 0.0f : dy.at(i) * (1.0f / (1.0f - p))) << i;
}

TEST(Dropout, InPlaceZeroPAndBadP) {
  Tensor x = random_normal({50}, 9);
  Tensor ref = Tensor::host(DType::f32, {50});
  dropout_forward(cpu(), x, ref, 0.4f, 1, 2);
  dropout_forward(cpu(), x, x, 0.4f, 1, 2);
  EXPECT_EQ(max_abs_diff(x, ref), 0.0);

  Tensor y = Tensor::host(DType::f32, {50});
  dropout_forward(cpu(), ref, y, 0.0f, 1, 2);
  EXPECT_EQ(max_abs_diff(y, ref), 0.0);
  EXPECT_THROW(dropout_forward(cpu(), x, y, 1.0f, 1, 2), Error);
  EXPECT_THROW(dropout_forward(cpu(), x, Tensor::host(DType::f32, {49}), 0.1f, 1, 2), Error);
}

}  // namespace
}  // namespace troupe::test
