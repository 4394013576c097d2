// The paged KV cache of a model for inference: per layer a K and a V tensor
// [num_blocks, block_size, G, D] (kernels/paged_attention.hpp), and the allocator that hands
// blocks to sequences. A sequence holds a list of block ids (its block table) that grows as it
// does, and gives them all back when it ends. One more block than num_blocks exists: the scratch
// block, never handed out, where padding rows of a fixed-size batch (a CUDA graph's) write.
// Under tensor parallelism each rank's cache holds its G / T query groups (KV heads).
//
//   KvCache cache(ctx, config, DType::bf16, /*num_blocks=*/4096, /*block_size=*/16);
//   std::vector<int32_t> blocks;
//   if (cache.allocate(cache.blocks_for(prompt_len + 1), blocks)) ...   // all or nothing
//   cache.release(blocks);                                              // back to the free list
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/config.hpp"

namespace troupe {

class KvCache {
 public:
  // tensor_parallel: the size T of the model's tensor-parallel group (G / T heads here).
  KvCache(const Context& ctx, const GptConfig& config, DType dtype, int64_t num_blocks, int block_size,
          int tensor_parallel = 1);

  // How many blocks of `block_size` tokens fit in `bytes` of one rank's cache memory for this model.
  static int64_t blocks_in_bytes(const GptConfig& config, DType dtype, int block_size, size_t bytes,
                                 int tensor_parallel = 1);

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  // Blocks needed to hold `tokens` tokens.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  DType dtype() const { return dtype_; }
  int32_t scratch_block() const { return int32_t(num_blocks_); }
  int query_groups() const { return query_groups_; }              // G / T
  const Tensor& k(int layer) const { return k_[size_t(layer)]; }  // [num_blocks + 1, block_size, G / T, D]
  const Tensor& v(int layer) const { return v_[size_t(layer)]; }

  // Appends `n` free blocks to `blocks`; returns false (and allocates nothing) when fewer are free.
  bool allocate(int64_t n, std::vector<int32_t>& blocks);
  // Returns every block of `blocks` to the free list and clears it. Throws on a block that is
  // not allocated (a double free).
  void release(std::vector<int32_t>& blocks);

 private:
  int block_size_;
  int query_groups_;
  int64_t num_blocks_;
  DType dtype_;
  std::vector<Tensor> k_, v_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::vector<bool> in_use_;
};

}  // namespace troupe
