#include "kernels/row_blocks.hpp"

#include <cstring>

#include "kernels/dispatch.hpp"

namespace troupe {

void copy_row_blocks(const Context& ctx, const Tensor& src, const Tensor& dst, const std::vector<RowBlock>& blocks) {
  constexpr const char* op = "copy_row_blocks";
  expect_device(op, "src", ctx, src);
  expect_device(op, "dst", ctx, dst);
  TROUPE_CHECK(src.ndim() == 2 && dst.ndim() == 2 && src.dim(1) == dst.dim(1), op, ": src ", src.str(), " and dst ",
               dst.str(), " should be [rows, C] of one C");
  expect_dtype(op, "dst", dst, src.dtype());
  for (const RowBlock& b : blocks)
    TROUPE_CHECK(
        b.rows >= 0 && b.from >= 0 && b.to >= 0 && b.from + b.rows <= src.dim(0) && b.to + b.rows <= dst.dim(0), op,
        ": block of ", b.rows, " rows from ", b.from, " to ", b.to, " is outside src ", src.str(), " or dst ",
        dst.str());
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::copy_row_blocks(ctx, src, dst, blocks));
  } else {
    cpu::copy_row_blocks(src, dst, blocks);
  }
}

namespace cpu {

void copy_row_blocks(const Tensor& src, const Tensor& dst, const std::vector<RowBlock>& blocks) {
  const size_t row_bytes = size_t(src.dim(1)) * dtype_size(src.dtype());
  const auto* from = static_cast<const unsigned char*>(src.data());
  auto* to = static_cast<unsigned char*>(dst.data());
  for (const RowBlock& b : blocks)
    if (b.rows > 0)
      std::memcpy(to + size_t(b.to) * row_bytes, from + size_t(b.from) * row_bytes, size_t(b.rows) * row_bytes);
}

}  // namespace cpu
}  // namespace troupe
