#include "model/kv_cache.hpp"

#include "kernels/check.hpp"

namespace troupe {

KvCache::KvCache(const Context& ctx, const GptConfig& config, DType dtype, int64_t num_blocks, int block_size)
    : block_size_(block_size), num_blocks_(num_blocks), dtype_(dtype) {
  TROUPE_CHECK(block_size > 0 && num_blocks > 0, "KvCache: needs positive block_size and num_blocks, got ",
               block_size, " and ", num_blocks);
  TROUPE_CHECK((num_blocks + 1) * block_size <= int64_t(INT32_MAX), "KvCache: ", num_blocks, " blocks of ",
               block_size, " tokens exceed the 32-bit slot numbers");
  const Shape shape{num_blocks + 1, block_size, config.query_groups(), config.head_dim()};  // + the scratch block
  for (int l = 0; l < config.num_layers; ++l) {
    k_.push_back(Tensor::zeros(ctx, dtype, shape));
    v_.push_back(Tensor::zeros(ctx, dtype, shape));
  }
  free_.reserve(size_t(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 handed out first
  in_use_.assign(size_t(num_blocks), false);
}

int64_t KvCache::blocks_in_bytes(const GptConfig& config, DType dtype, int block_size, size_t bytes) {
  const size_t per_block = 2 * size_t(config.num_layers) * size_t(block_size) * size_t(config.query_groups()) *
                           size_t(config.head_dim()) * dtype_size(dtype);
  return int64_t(bytes / per_block);
}

bool KvCache::allocate(int64_t n, std::vector<int32_t>& blocks) {
  TROUPE_CHECK(n >= 0, "KvCache::allocate: negative block count ", n);
  if (n > free_blocks()) return false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[size_t(b)] = true;
    blocks.push_back(b);
  }
  return true;
}

void KvCache::release(std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    TROUPE_CHECK(b >= 0 && b < num_blocks_ && in_use_[size_t(b)], "KvCache::release: block ", b,
                 " is not allocated (freed twice?)");
    in_use_[size_t(b)] = false;
    free_.push_back(b);
  }
  blocks.clear();
}

}  // namespace troupe
