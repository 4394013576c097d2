// ScratchTensor (model/moe/scratch_tensor.hpp) on the CPU: a host tensor of the asked dtype and
// shape that keeps what is written into it while it lives.
#include <gtest/gtest.h>

#include "model/moe/scratch_tensor.hpp"

namespace troupe {
namespace {

TEST(ScratchTensor, IsAHostTensorOfTheShapeOnTheCpu) {
  const Context ctx = Context::cpu();
  const ScratchTensor t(ctx, DType::f32, {3, 5});
  const Tensor& view = t;
  EXPECT_FALSE(view.is_cuda());
  EXPECT_EQ(view.dtype(), DType::f32);
  EXPECT_EQ(view.shape(), (Shape{3, 5}));
  for (int64_t i = 0; i < view.numel(); ++i) view.data_as<float>()[i] = float(i);
  EXPECT_EQ(t.tensor().data_as<float>()[14], 14.0f);
}

TEST(ScratchTensor, EmptyShapeIsDefined) {
  const Context ctx = Context::cpu();
  const ScratchTensor t(ctx, DType::bf16, {0, 8});
  EXPECT_TRUE(t.tensor().defined());
  EXPECT_EQ(t.tensor().numel(), 0);
}

}  // namespace
}  // namespace troupe
