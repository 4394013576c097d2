// copy_row_blocks on the CPU (kernels/row_blocks.hpp): each block's rows land where it says, the
// rest of dst stays, and a block outside either tensor or a width mismatch is refused.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/row_blocks.hpp"

namespace troupe {
namespace {

TEST(RowBlocks, CopiesEachBlockAndNothingElse) {
  const Context ctx = Context::cpu();
  const Tensor src = Tensor::host_f32({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  const Tensor dst = Tensor::host_f32({5, 2}, std::vector<float>(10, -1.0f));
  copy_row_blocks(ctx, src, dst, {{.from = 2, .to = 0, .rows = 2}, {.from = 0, .to = 3, .rows = 1}, {0, 4, 0}});
  const std::vector<float> want = {20, 21, 30, 31, -1, -1, 0, 1, -1, -1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(dst.data_as<float>()[i], want[i]) << "element " << i;
}

TEST(RowBlocks, RefusesBlocksOutsideAndWidthMismatch) {
  const Context ctx = Context::cpu();
  const Tensor src = Tensor::host_f32({4, 2}, std::vector<float>(8, 0.0f));
  const Tensor dst = Tensor::host_f32({4, 2}, std::vector<float>(8, 0.0f));
  EXPECT_THROW(copy_row_blocks(ctx, src, dst, {{3, 0, 2}}), std::exception);
  EXPECT_THROW(copy_row_blocks(ctx, src, dst, {{0, 3, 2}}), std::exception);
  EXPECT_THROW(copy_row_blocks(ctx, src, dst, {{0, 0, -1}}), std::exception);
  const Tensor wide = Tensor::host_f32({4, 3}, std::vector<float>(12, 0.0f));
  EXPECT_THROW(copy_row_blocks(ctx, src, wide, {{0, 0, 1}}), std::exception);
}

}  // namespace
}  // namespace troupe
