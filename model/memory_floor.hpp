// The least memory one training microbatch needs, known before anything is allocated: the
// logits of the stage that holds the LM head, [B*T, Vp/TP] in the compute dtype (their gradient
// is written in place). A lower bound only, so a micro-batch size that cannot fit is refused
// before the data loader builds its samples and the first iteration tries (and swaps or hangs).
//
//   int64_t floor = microbatch_memory_floor(config, 8, 1, DType::bf16);
#pragma once

#include <cstdint>

#include "kernels/dtype.hpp"
#include "model/config.hpp"

namespace troupe {

int64_t microbatch_memory_floor(const GptConfig& config, int64_t micro_batch, int tensor_parallel, DType compute);

// Throws naming --micro-batch-size when microbatch_memory_floor exceeds `device_bytes`.
void check_microbatch_fits(const GptConfig& config, int64_t micro_batch, int tensor_parallel, DType compute,
                           int64_t device_bytes);

}  // namespace troupe
