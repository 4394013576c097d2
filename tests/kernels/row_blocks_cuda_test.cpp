// copy_row_blocks on CUDA (kernels/row_blocks.hpp) against the CPU backend: an expert exchange's
// reorder (many blocks of uneven rows, empty ones among them) in bf16 with 16-byte rows, in f32
// with rows of 12 bytes (the byte-wise path), and at an odd row offset; rows no block writes keep
// their values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/row_blocks.hpp"

namespace troupe {
namespace {

void expect_like_cpu(DType dtype, int64_t width, int64_t dst_offset_rows) {
  const Context ctx = Context::cuda(0);
  std::vector<RowBlock> blocks;
  int64_t src_rows = 0, dst_rows = 0;
  for (int i = 0; i < 130; ++i) {  // 2 members x 65 experts; every 7th block empty
    const int64_t n = i % 7 == 0 ? 0 : (i * 37) % 11 + 1;
    blocks.push_back({src_rows, 0, n});
    src_rows += n;
  }
  // Destinations in another order (reversed), past dst_offset_rows.
  dst_rows = dst_offset_rows;
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    it->to = dst_rows;
    dst_rows += it->rows;
  }
  dst_rows += 3;  // rows left alone
  std::vector<float> sv(size_t(src_rows * width)), dv(size_t(dst_rows * width));
  for (size_t i = 0; i < sv.size(); ++i) sv[i] = std::sin(0.1f * float(i));
  for (size_t i = 0; i < dv.size(); ++i) dv[i] = -1.0f - float(i % 5);
  const Tensor src_h = round_through(Tensor::host_f32({src_rows, width}, sv), dtype);
  const Tensor want = round_through(Tensor::host_f32({dst_rows, width}, dv), dtype);
  cpu::copy_row_blocks(src_h, want, blocks);

  const Tensor src = to_device(ctx, src_h, dtype), dst = to_device(ctx, Tensor::host_f32({dst_rows, width}, dv), dtype);
  copy_row_blocks(ctx, src, dst, blocks);
  const Tensor got = to_host_f32(ctx, dst);
  for (int64_t i = 0; i < dst_rows * width; ++i)
    ASSERT_EQ(got.data_as<float>()[i], want.data_as<float>()[i])
        << dtype_name(dtype) << " width " << width << ", element " << i;
}

TEST(RowBlocksCuda, MatchesTheCpu) {
  expect_like_cpu(DType::bf16, 64, 0);  // 128-byte rows: 16-byte words
  expect_like_cpu(DType::f32, 3, 0);    // 12-byte rows: bytes
  expect_like_cpu(DType::bf16, 8, 5);
}

TEST(RowBlocksCuda, RefusesABlockOutsideTheTensors) {
  const Context ctx = Context::cuda(0);
  const Tensor a = Tensor::empty(ctx, DType::bf16, {4, 8}), b = Tensor::empty(ctx, DType::bf16, {4, 8});
  EXPECT_THROW(copy_row_blocks(ctx, a, b, {{2, 0, 3}}), std::exception);
  EXPECT_THROW(copy_row_blocks(ctx, a, b, {{0, 2, 3}}), std::exception);
  ctx.synchronize();
}

}  // namespace
}  // namespace troupe
