// Helpers shared by the inference tests (paged attention, inference model, engine).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/config.hpp"

namespace troupe::test {

// A 2-layer model with 4 heads: GPT-2 (LayerNorm, learned positions, GELU, biases, tied) or
// Llama-style (RMSNorm, RoPE, SwiGLU with F = 3/2 hidden, 2 query groups, no biases, untied).
// The vocabulary is padded to a multiple of 8.
GptConfig tiny_inference_config(bool llama, int hidden, int seq_length, int64_t vocab);
// n token ids in [0, vocab).
std::vector<int32_t> random_token_list(int64_t n, uint64_t seed, int32_t vocab);
// A host i32 tensor holding `values`.
Tensor host_i32(const std::vector<int32_t>& values, Shape shape);

}  // namespace troupe::test
