// ScratchTensor (model/moe/scratch_tensor.hpp) and Tensor::stream_ordered on a GPU: stream-ordered
// device memory of the asked shape that round-trips values, blocks freed on the stream are served
// again, and a stream-ordered tensor lives as long as a reference to it (views included).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "model/moe/scratch_tensor.hpp"

namespace troupe {
namespace {

TEST(ScratchTensorCuda, DeviceMemoryThatRoundTrips) {
  const Context ctx = Context::cuda(0);
  const std::vector<float> values = {1.0f, -2.5f, 3.0f, 4.25f, 0.0f, 6.0f};
  for (int round = 0; round < 3; ++round) {  // later rounds reuse the pool's freed blocks
    const ScratchTensor t(ctx, DType::f32, {2, 3});
    EXPECT_TRUE(t.tensor().is_cuda());
    EXPECT_EQ(t.tensor().shape(), (Shape{2, 3}));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.tensor().data()) % 256, 0u);
    copy(ctx, Tensor::host_f32({2, 3}, values), t);
    const Tensor back = to_host_f32(ctx, t);
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(back.data_as<float>()[i], values[i]) << "element " << i;
  }
  const ScratchTensor empty(ctx, DType::bf16, {0, 4});
  EXPECT_TRUE(empty.tensor().defined());
  ctx.synchronize();
}

TEST(ScratchTensorCuda, StreamOrderedTensorLivesWhileReferenced) {
  const Context ctx = Context::cuda(0);
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f};
  Tensor view;
  {
    const Tensor t = Tensor::stream_ordered(ctx, DType::f32, {2, 2});
    EXPECT_TRUE(t.is_cuda());
    copy(ctx, Tensor::host_f32({2, 2}, values), t);
    view = t.slice(2, {2});
  }
  // t is gone; its storage is not: another allocation must not take it over.
  const Tensor other = Tensor::stream_ordered(ctx, DType::f32, {2, 2});
  fill_zero(ctx, other);
  const Tensor back = to_host_f32(ctx, view);
  EXPECT_EQ(back.data_as<float>()[0], 3.0f);
  EXPECT_EQ(back.data_as<float>()[1], 4.0f);
  EXPECT_NE(view.data(), other.data());
  ctx.synchronize();
}

}  // namespace
}  // namespace troupe
