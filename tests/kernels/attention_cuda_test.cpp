// CUDA attention against the CPU reference in bf16 and f16: the flash kernels (D = 64, 128)
// and the simple fallback (other head dims), on GQA and MHA shapes with ragged T, unbounded
// and under sliding windows (W = 1, W not a multiple of any tile, W spanning many tiles, W >= T);
// then the cuDNN backend (TROUPE_ATTENTION_BACKEND=cudnn, cudnn-deterministic) on the same checks.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "kernels/attention.hpp"
#include "tests/kernels/attention_backend.hpp"
#include "tests/test_util.hpp"

#if TROUPE_HAVE_CUDA  // without CUDA this binary only skips, and the backend switch does not exist
#include "kernels/cuda/attention_cudnn.hpp"
#endif

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

// Runs forward and backward of case c on `backend` and compares with the CPU. `covered`: the
// backend must take the case itself (cuDNN: no silent fallback to ours).
void check_against_cpu(const CudaCase& c, DType t, Backend backend, bool covered) {
  const UseBackend use(backend);
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
#if TROUPE_HAVE_CUDA
  if (backend != Backend::flash) {
    EXPECT_EQ(cuda::cudnn_attention_supports(gpu(), qkv_d, cfg, {&out_d, &lse_d, &dout_d, &dqkv_d}, true), covered)
        << "cuDNN coverage of this case changed";
  }
#else
  (void)covered;
#endif
  attention_forward(gpu(), qkv_d, cfg, out_d, lse_d);
  attention_backward(gpu(), dout_d, qkv_d, out_d, lse_d, cfg, dqkv_d);
  const Tensor out = to_host_f32(gpu(), out_d), lse = to_host_f32(gpu(), lse_d), dqkv = to_host_f32(gpu(), dqkv_d);

  const double e_out = rel_error(out, out_ref), e_lse = rel_error(lse, lse_ref);
  const double e_dq = error_vs(head_slots(dqkv, 0, c.H, c.D), head_slots(dqkv_ref, 0, c.H, c.D));
  const double e_dk = error_vs(head_slots(dqkv, c.H, c.G, c.D), head_slots(dqkv_ref, c.H, c.G, c.D));
  const double e_dv = error_vs(head_slots(dqkv, c.H + c.G, c.G, c.D), head_slots(dqkv_ref, c.H + c.G, c.G, c.D));
  std::printf("%s B=%lld T=%lld H=%d G=%d D=%d W=%d %s: rel err out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
              backend_name(backend), (long long)c.B, (long long)c.T, c.H, c.G, c.D, c.window, dtype_name(t), e_out,
              e_lse, e_dq, e_dk, e_dv);
  EXPECT_LT(e_out, 2e-2);
  EXPECT_LT(e_lse, 2e-3);  // lse is f32 from f32 scores (cuDNN: its softmax stats, natural log)
  EXPECT_LT(e_dq, 2e-2);
  EXPECT_LT(e_dk, 2e-2);
  EXPECT_LT(e_dv, 2e-2);

  // Ours has no atomics anywhere, nor has cuDNN's deterministic backward: a second backward is
  // bit-identical. (cuDNN's default backward accumulates dq with atomics.)
  const bool deterministic = backend != Backend::cudnn || !covered;
  if (deterministic) {
    Tensor again_d = nan_filled(t, qkv_shape);
    attention_backward(gpu(), dout_d, qkv_d, out_d, lse_d, cfg, again_d);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), again_d), dqkv), 0.0);
  }

  // A window of T or more is unbounded attention, bit for bit.
  if (c.window >= c.T) {
    const AttentionConfig unbounded{c.H, c.G, c.D};
    Tensor out0_d = nan_filled(t, out_shape), lse0_d = nan_filled(DType::f32, lse_shape);
    Tensor dqkv0_d = nan_filled(t, qkv_shape);
    attention_forward(gpu(), qkv_d, unbounded, out0_d, lse0_d);
    attention_backward(gpu(), dout_d, qkv_d, out0_d, lse0_d, unbounded, dqkv0_d);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), out0_d), out), 0.0);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), lse0_d), lse), 0.0);
    if (deterministic) {
      EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), dqkv0_d), dqkv), 0.0);
    }
  }
}

std::string case_name(const CudaCase& c, DType t) {
  return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "H" + std::to_string(c.H) + "G" + std::to_string(c.G) +
         "D" + std::to_string(c.D) + (c.window > 0 ? "W" + std::to_string(c.window) : "") + "_" + dtype_name(t);
}

class AttentionCuda : public ::testing::TestWithParam<std::tuple<CudaCase, DType>> {};

TEST_P(AttentionCuda, ForwardAndBackwardMatchCpu) {
  const auto [c, t] = GetParam();
  check_against_cpu(c, t, Backend::flash, true);
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
                         [](const auto& info) { return case_name(std::get<0>(info.param), std::get<1>(info.param)); });

// The cuDNN backend on the same checks. Its graphs cover D = 64 and 128; other head dims run ours.
struct CudnnCase {
  CudaCase shape;
  bool covered = true;  // false: cuDNN does not take it, ours runs
};

const CudnnCase kCudnnCases[] = {
    {{2, 128, 4, 4, 64}},                    // MHA
    {{1, 200, 8, 2, 128}},                   // GQA (H=8, G=2), T not a multiple of 64
    {{2, 333, 8, 2, 64}},                    // GQA, D = 64, T odd
    {{1, 13, 4, 2, 64, 3.0f}},               // one partial tile, peaky softmax
    {{1, 333, 6, 1, 128, 2.0f}},             // multi-query
    {{1, 1000, 4, 1, 128, 1.0f, 193}},       // sliding window (cuDNN's diagonal band)
    {{2, 1024, 8, 2, 64, 1.0f, 256}},        // sliding window, GQA
    {{1, 300, 4, 1, 64, 3.0f, 1}},           // W = 1: out = v
    {{1, 130, 4, 2, 128, 1.0f, 1000}},       // W > T: unbounded (checked equal)
    {{1, 77, 4, 2, 32}, /*covered=*/false},  // D = 32: ours
};

class AttentionCudnn : public ::testing::TestWithParam<std::tuple<CudnnCase, DType, Backend>> {};

TEST_P(AttentionCudnn, ForwardAndBackwardMatchCpu) {
#if TROUPE_HAVE_CUDA && !TROUPE_HAVE_CUDNN
  GTEST_SKIP() << "this build has no cuDNN";
#endif
  const auto [c, t, backend] = GetParam();
  check_against_cpu(c.shape, t, backend, c.covered);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCudnn,
                         ::testing::Combine(::testing::ValuesIn(kCudnnCases),
                                            ::testing::Values(DType::bf16, DType::f16),
                                            ::testing::Values(Backend::cudnn, Backend::cudnn_deterministic)),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param).shape, std::get<1>(info.param)) + "_" +
                                  backend_name(std::get<2>(info.param));
                         });

#if TROUPE_HAVE_CUDA && TROUPE_HAVE_CUDNN
TEST(AttentionCudnnSetup, LoadedCudnnIsNewEnough) {
  std::printf("cuDNN %d loaded, attention graphs need %d\n", cuda::cudnn_runtime_version(),
              cuda::cudnn_min_attention_version());
  EXPECT_GE(cuda::cudnn_runtime_version(), cuda::cudnn_min_attention_version());
}

TEST(AttentionCudnnSetup, BackendNamesParse) {
  EXPECT_EQ(cuda::parse_attention_backend("flash"), cuda::AttentionBackend::flash);
  EXPECT_EQ(cuda::parse_attention_backend("cudnn"), cuda::AttentionBackend::cudnn);
  EXPECT_EQ(cuda::parse_attention_backend("cudnn-deterministic"), cuda::AttentionBackend::cudnn_deterministic);
  try {
    cuda::parse_attention_backend("cuDNN");
    ADD_FAILURE() << "a misspelled backend was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("TROUPE_ATTENTION_BACKEND=cuDNN"), std::string::npos) << msg;
    EXPECT_NE(msg.find("flash, cudnn or cudnn-deterministic"), std::string::npos) << msg;
  }
}

// The variable is read at each call: a bad value fails the next attention call, naming it.
TEST(AttentionCudnnSetup, BadEnvironmentValueIsAnError) {
  const char* saved = std::getenv("TROUPE_ATTENTION_BACKEND");
  const std::string restore = saved ? saved : "";
  ::setenv("TROUPE_ATTENTION_BACKEND", "fast", 1);
  Tensor qkv = Tensor::zeros(gpu(), DType::bf16, {1, 4, 3 * 64});
  Tensor out = Tensor::zeros(gpu(), DType::bf16, {1, 4, 64}), lse = Tensor::zeros(gpu(), DType::f32, {1, 1, 4});
  try {
    attention_forward(gpu(), qkv, {1, 1, 64}, out, lse);
    ADD_FAILURE() << "TROUPE_ATTENTION_BACKEND=fast was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TROUPE_ATTENTION_BACKEND=fast"), std::string::npos) << e.what();
  }
  ::setenv("TROUPE_ATTENTION_BACKEND", "cudnn", 1);
  EXPECT_EQ(cuda::attention_backend(), cuda::AttentionBackend::cudnn);
  {
    const cuda::ScopedAttentionBackend flash(cuda::AttentionBackend::flash);  // the override wins
    EXPECT_EQ(cuda::attention_backend(), cuda::AttentionBackend::flash);
  }
  if (saved)
    ::setenv("TROUPE_ATTENTION_BACKEND", restore.c_str(), 1);
  else
    ::unsetenv("TROUPE_ATTENTION_BACKEND");
}
#endif

TEST(AttentionCudaArgs, F32IsAnError) {
  Tensor qkv = Tensor::zeros(gpu(), DType::f32, {1, 4, 3 * 64});
  Tensor out = Tensor::zeros(gpu(), DType::f32, {1, 4, 64}), lse = Tensor::zeros(gpu(), DType::f32, {1, 1, 4});
  EXPECT_THROW(attention_forward(gpu(), qkv, {1, 1, 64}, out, lse), Error);
}

}  // namespace
}  // namespace troupe::test
