// ContextLanes (kernels/context_lanes.hpp) on a GPU: use(1) points the context at a stream of its
// own and use(0) (or the lanes going away) back at the original one; a GEMM (cuBLASLt, its
// workspace) on lane 1 gives lane 0's bits and the CPU backend's values; memory made on lane 1
// and a fence from it serve work on lane 0.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/check.hpp"
#include "kernels/context_lanes.hpp"
#include "kernels/cuda/stream_alloc.hpp"
#include "kernels/linear.hpp"
#include "kernels/stream_fence.hpp"

namespace troupe {
namespace {

std::vector<float> pattern(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * float(i) + 0.1f);
  return v;
}

TEST(ContextLanesCuda, SecondLaneIsAStreamOfItsOwnUntilSwitchedBack) {
  const Context ctx = Context::cuda(0);
  void* const own = cuda::stream_handle(ctx);
  {
    ContextLanes lanes(ctx);
    EXPECT_EQ(lanes.lane(), 0);
    EXPECT_EQ(cuda::stream_handle(ctx), own);
    lanes.use(1);
    EXPECT_EQ(lanes.lane(), 1);
    void* const second = cuda::stream_handle(ctx);
    EXPECT_NE(second, own);
    lanes.use(1);  // again: stays
    EXPECT_EQ(cuda::stream_handle(ctx), second);
    lanes.use(0);
    EXPECT_EQ(cuda::stream_handle(ctx), own);
    lanes.use(1);
    EXPECT_EQ(cuda::stream_handle(ctx), second);
    EXPECT_THROW(lanes.use(2), Error);
  }  // gone on lane 1: back on the context's own stream
  EXPECT_EQ(cuda::stream_handle(ctx), own);
  ctx.synchronize();
}

TEST(ContextLanesCuda, GemmOnTheSecondLaneMatchesTheFirstAndTheCpu) {
  const Context ctx = Context::cuda(0);
  const int64_t m = 64, k = 96, n = 80;
  const std::vector<float> xv = pattern(size_t(m * k), 1.0f), wv = pattern(size_t(n * k), 0.25f);
  const Tensor x = to_device(ctx, Tensor::host_f32({m, k}, xv), DType::bf16);
  const Tensor w = to_device(ctx, Tensor::host_f32({n, k}, wv), DType::bf16);
  const Tensor y0 = Tensor::empty(ctx, DType::bf16, {m, n}), y1 = Tensor::empty(ctx, DType::bf16, {m, n});
  ContextLanes lanes(ctx);
  linear_forward(ctx, x, w, Tensor(), y0);
  lanes.use(1);
  // Stream-ordered memory on lane 1, read on lane 0 behind a fence.
  const Tensor staged = Tensor::stream_ordered(ctx, DType::bf16, {m, n});
  linear_forward(ctx, x, w, Tensor(), staged);
  const std::shared_ptr<void> written = fence_record(ctx);
  lanes.use(0);
  fence_wait(ctx, written);
  copy(ctx, staged, y1);
  const Tensor a = to_host_f32(ctx, y0), b = to_host_f32(ctx, y1);

  // The CPU reference on the same bf16-rounded inputs.
  const Tensor xr = round_through(Tensor::host_f32({m, k}, xv), DType::bf16);
  const Tensor wr = round_through(Tensor::host_f32({n, k}, wv), DType::bf16);
  const Tensor ref = Tensor::host_f32({m, n}, std::vector<float>(size_t(m * n), 0.0f));
  cpu::linear_forward(xr, wr, Tensor(), ref, false);
  for (int64_t i = 0; i < m * n; ++i) {
    ASSERT_EQ(a.data_as<float>()[i], b.data_as<float>()[i]) << "element " << i << ": lane 1 differs from lane 0";
    const float r = ref.data_as<float>()[i];
    ASSERT_NEAR(b.data_as<float>()[i], r, 1e-2f * (1.0f + std::fabs(r))) << "element " << i;
  }
  ctx.synchronize();
}

}  // namespace
}  // namespace troupe
