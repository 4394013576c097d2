#include "model/memory_floor.hpp"

#include "base/check.hpp"

namespace troupe {

namespace {
double gib(double bytes) { return bytes / double(int64_t(1) << 30); }
}  // namespace

int64_t microbatch_memory_floor(const GptConfig& config, int64_t micro_batch, int tensor_parallel, DType compute) {
  const double rows = double(micro_batch) * double(config.seq_length);
  const double vocab = double(config.padded_vocab_size(tensor_parallel) / tensor_parallel);
  const double bytes = rows * vocab * double(dtype_size(compute));
  return bytes >= 9.0e18 ? INT64_MAX : int64_t(bytes);  // no overflow for absurd sizes
}

void check_microbatch_fits(const GptConfig& config, int64_t micro_batch, int tensor_parallel, DType compute,
                           int64_t device_bytes) {
  const int64_t floor = microbatch_memory_floor(config, micro_batch, tensor_parallel, compute);
  TROUPE_CHECK(floor <= device_bytes, "--micro-batch-size ", micro_batch, " cannot fit: one microbatch's logits (",
               micro_batch, " x --seq-length ", config.seq_length, " x vocabulary ",
               config.padded_vocab_size(tensor_parallel) / tensor_parallel, ") alone take ", gib(double(floor)),
               " GiB, more than the ", gib(double(device_bytes)),
               " GiB of one device; lower --micro-batch-size (--global-batch-size keeps the batch through more "
               "microbatches)");
}

}  // namespace troupe
