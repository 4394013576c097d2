// CUDA attention against the CPU reference in bf16 and f16: the flash kernels (D = 64, 128)
// and the simple fallback (other head dims), on GQA and MHA shapes with ragged T, unbounded
// and under sliding windows (W = 1, W not a multiple of any tile, W spanning many tiles, W >= T).
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>

#include "kernels/attention.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct CudaCase {
  int64_t B, T;
  int H, G, D;
  float stddev = 1.0f;  // of q, k, v: larger makes the softmax peakier
  int window = 0;       // sliding window W (0: unbounded)
};

// Columns [first * D, (first + count) * D) of every token row of a host [B, T, W] tensor.
Tensor head_slots(const Tensor& x, int first, int count, int D) {
  const int64_t rows = x.dim(0) * x.dim(1), width = x.dim(2), cols = int64_t(count) * D;
  Tensor part = Tensor::host(DType::f32, {rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) part.at(r * cols + c) = x.at(r * width + int64_t(first) * D + c);
  return part;
}

// A device tensor filled with NaN, so that any element an op fails to write shows up.
Tensor nan_filled(DType t, const Shape& shape) {
  Tensor h = Tensor::host(DType::f32, shape);
  for (int64_t i = 0; i < h.numel(); ++i) h.at(i) = std::numeric_limits<float>::quiet_NaN();
  return to_device(gpu(), h, t);
}

// rel_error, or the largest absolute error where the reference is exactly zero (W = 1: every
// row attends only to itself, so dS = 0 and with it dq and dk).
double error_vs(const Tensor& got, const Tensor& ref) {
  return dot(ref, ref) == 0.0 ? max_abs_diff(got, ref) : rel_error(got, ref);
}

class AttentionCuda : public ::testing::TestWithParam<std::tuple<CudaCase, DType>> {};

TEST_P(AttentionCuda, ForwardAndBackwardMatchCpu) {
  const auto [c, t] = GetParam();
  const AttentionConfig cfg{c.H, c.G, c.D, 0.0f, c.window};
  const Shape qkv_shape{c.B, c.T, int64_t(c.H + 2 * c.G) * c.D}, out_shape{c.B, c.T, int64_t(c.H) * c.D};
  const Shape lse_shape{c.B, c.H, c.T};
  Tensor qkv = round_through(random_normal(qkv_shape, 21, c.stddev), t);
  Tensor dout = round_through(random_normal(out_shape, 22), t);

  Tensor out_ref = Tensor::host(DType::f32, out_shape), lse_ref = Tensor::host(DType::f32, lse_shape);
  Tensor dqkv_ref = Tensor::host(DType::f32, qkv_shape);
  attention_forward(cpu(), qkv, cfg, out_ref, lse_ref);
  attention_backward(cpu(), dout, qkv, out_ref, lse_ref, cfg, dqkv_ref);

  Tensor qkv_d = to_device(gpu(), qkv, t), dout_d = to_device(gpu(), dout, t);
  Tensor out_d = nan_filled(t, out_shape), lse_d = nan_filled(DType::f32, lse_shape);
  Tensor dqkv_d = nan_filled(t, qkv_shape);
  attention_forward(gpu(), qkv_d, cfg, out_d, lse_d);
  attention_backward(gpu(), dout_d, qkv_d, out_d, lse_d, cfg, dqkv_d);
  const Tensor out = to_host_f32(gpu(), out_d), lse = to_host_f32(gpu(), lse_d), dqkv = to_host_f32(gpu(), dqkv_d);

  const double e_out = rel_error(out, out_ref), e_lse = rel_error(lse, lse_ref);
  const double e_dq = error_vs(head_slots(dqkv, 0, c.H, c.D), head_slots(dqkv_ref, 0, c.H, c.D));
  const double e_dk = error_vs(head_slots(dqkv, c.H, c.G, c.D), head_slots(dqkv_ref, c.H, c.G, c.D));
  const double e_dv = error_vs(head_slots(dqkv, c.H + c.G, c.G, c.D), head_slots(dqkv_ref, c.H + c.G, c.G, c.D));
  std::printf("B=%lld T=%lld H=%d G=%d D=%d W=%d %s: rel err out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
              (long long)c.B, (long long)c.T, c.H, c.G, c.D, c.window, dtype_name(t), e_out, e_lse, e_dq, e_dk, e_dv);
  EXPECT_LT(e_out, 2e-2);
  EXPECT_LT(e_lse, 2e-3);  // lse is f32 from f32 scores
  EXPECT_LT(e_dq, 2e-2);
  EXPECT_LT(e_dk, 2e-2);
  EXPECT_LT(e_dv, 2e-2);

  // No atomics anywhere: a second backward is bit-identical.
  Tensor again_d = nan_filled(t, qkv_shape);
  attention_backward(gpu(), dout_d, qkv_d, out_d, lse_d, cfg, again_d);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), again_d), dqkv), 0.0);

  // A window of T or more is unbounded attention, bit for bit.
  if (c.window >= c.T) {
    const AttentionConfig unbounded{c.H, c.G, c.D};
    Tensor out0_d = nan_filled(t, out_shape), lse0_d = nan_filled(DType::f32, lse_shape);
    Tensor dqkv0_d = nan_filled(t, qkv_shape);
    attention_forward(gpu(), qkv_d, unbounded, out0_d, lse0_d);
    attention_backward(gpu(), dout_d, qkv_d, out0_d, lse0_d, unbounded, dqkv0_d);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), out0_d), out), 0.0);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), lse0_d), lse), 0.0);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), dqkv0_d), dqkv), 0.0);
  }
}

const CudaCase kCases[] = {
    {2, 128, 4, 4, 64},         // flash, MHA
    {1, 200, 8, 2, 128},        // flash, GQA, T not a multiple of any tile
    {2, 1024, 12, 12, 64},      // flash, GPT-2 small layer
    {1, 13, 4, 2, 64, 3.0f},    // flash, one partial tile, peaky softmax
    {1, 333, 6, 1, 128, 2.0f},  // flash, multi-query
    {1, 77, 4, 2, 32},          // simple fallback
    {2, 50, 3, 1, 96, 2.0f},    // simple fallback, multi-query
    // Sliding windows. Flash tiles: 64 keys, 128 (D = 64) or 64 (D = 128) query rows.
    {2, 1024, 8, 2, 64, 1.0f, 256},   // flash, GQA, W a multiple of the tiles, many tiles skipped
    {1, 700, 4, 4, 64, 2.0f, 100},    // flash, W and T multiples of nothing
    {1, 333, 8, 2, 128, 1.0f, 77},    // flash D = 128, GQA
    {1, 1000, 4, 1, 128, 1.0f, 193},  // flash D = 128, MQA, W spanning several tiles
    {1, 300, 4, 1, 64, 3.0f, 1},      // flash, W = 1: out = v
    {1, 150, 4, 2, 64, 1.0f, 17},     // flash, W smaller than a warp's 16-row tile
    {1, 200, 4, 2, 64, 1.0f, 200},    // flash, W = T (checked equal to unbounded)
    {1, 130, 4, 2, 128, 1.0f, 1000},  // flash, W > T
    {1, 77, 4, 2, 32, 1.0f, 17},      // simple fallback
    {2, 50, 3, 1, 96, 2.0f, 1},       // simple fallback, W = 1
    {1, 400, 2, 2, 32, 1.0f, 129},    // simple fallback, long T
    {1, 60, 2, 1, 32, 1.0f, 64},      // simple fallback, W > T
};

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCuda,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(DType::bf16, DType::f16)),
                         [](const auto& info) {
                           const CudaCase& c = std::get<0>(info.param);
                           return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "H" + std::to_string(c.H) +
                                  "G" + std::to_string(c.G) + "D" + std::to_string(c.D) +
                                  (c.window > 0 ? "W" + std::to_string(c.window) : std::string()) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

TEST(AttentionCudaArgs, F32IsAnError) {
  Tensor qkv = Tensor::zeros(gpu(), DType::f32, {1, 4, 3 * 64});
  Tensor out = Tensor::zeros(gpu(), DType::f32, {1, 4, 64}), lse = Tensor::zeros(gpu(), DType::f32, {1, 1, 4});
  EXPECT_THROW(attention_forward(gpu(), qkv, {1, 1, 64}, out, lse), Error);
}

}  // namespace
}  // namespace troupe::test
