#include "model/inference/kv_cache.hpp"

#include "base/check.hpp"

namespace troupe {

namespace {
int local_query_groups(const GptConfig& config, int tensor_parallel) {
  TROUPE_CHECK(tensor_parallel >= 1 && config.query_groups() % tensor_parallel == 0, "KvCache: ", config.query_groups(),
               " query groups do not split over ", tensor_parallel, " tensor-parallel ranks");
  return config.query_groups() / tensor_parallel;
}
}  // namespace

KvCache::KvCache(const Context& ctx, const GptConfig& config, DType dtype, int64_t num_blocks, int block_size,
                 int tensor_parallel)
    : block_size_(block_size),
      query_groups_(local_query_groups(config, tensor_parallel)),
      num_blocks_(num_blocks),
      dtype_(dtype) {
  TROUPE_CHECK(block_size > 0 && num_blocks > 0, "KvCache: needs positive block_size and num_blocks, got ", block_size,
               " and ", num_blocks);
  TROUPE_CHECK((num_blocks + 1) * block_size <= int64_t(INT32_MAX), "KvCache: ", num_blocks, " blocks of ", block_size,
               " tokens exceed the 32-bit slot numbers");
  const Shape shape{num_blocks + 1, block_size, query_groups_, config.head_dim()};  // + the scratch block
  for (int l = 0; l < config.num_layers; ++l) {
    k_.push_back(Tensor::zeros(ctx, dtype, shape));
    v_.push_back(Tensor::zeros(ctx, dtype, shape));
  }
  free_.reserve(size_t(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 handed out first
  in_use_.assign(size_t(num_blocks), false);
}

int64_t KvCache::blocks_in_bytes(const GptConfig& config, DType dtype, int block_size, size_t bytes,
                                 int tensor_parallel) {
  const size_t groups = size_t(local_query_groups(config, tensor_parallel));
  const size_t per_block =
      2 * size_t(config.num_layers) * size_t(block_size) * groups * size_t(config.head_dim()) * dtype_size(dtype);
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
