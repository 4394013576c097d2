// Many blocks of whole rows copied between two [rows, C] tensors in one op: what an expert
// all-to-all does to put the rows it received (by sending member, then expert) into expert order
// and back (model/moe/expert_parallel.cpp), with a block per (member, expert). On CUDA one
// launch for all of them, where a copy per block costs the enqueuing thread a few microseconds
// each (64 experts over 2 members: 128 copies per exchange).
//
//   copy_row_blocks(ctx, received, local, {{.from = 0, .to = 40, .rows = 7}, ...});
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

struct RowBlock {
  int64_t from = 0;  // first row in src
  int64_t to = 0;    // first row in dst
  int64_t rows = 0;
};

// src, dst: [*, C] of one dtype on ctx's device; every block inside both. dst's other rows are
// left as they are. Blocks must not overlap in dst.
void copy_row_blocks(const Context& ctx, const Tensor& src, const Tensor& dst, const std::vector<RowBlock>& blocks);

namespace cpu {
void copy_row_blocks(const Tensor& src, const Tensor& dst, const std::vector<RowBlock>& blocks);
}  // namespace cpu
namespace cuda {
void copy_row_blocks(const Context& ctx, const Tensor& src, const Tensor& dst, const std::vector<RowBlock>& blocks);
}  // namespace cuda

}  // namespace troupe
