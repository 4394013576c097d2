// Text generation without a KV cache: each new token re-runs the forward over a fixed
// [1, seq_length] window (the prompt left-aligned, the rest padding that causal attention
// never lets the real positions see) and samples from the last real position's logits.
// Quadratic in length; meant for a quick sample after training, not for serving.
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt_chunk.hpp"

namespace troupe {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  float temperature = 0.8f;  // 0: greedy
  int top_k = 40;            // 0: the whole vocabulary
  uint64_t seed = 1234;
  int32_t stop_token = -1;   // stop after emitting this id (e.g. EOD); -1: never
};

// Returns only the new tokens.
std::vector<int32_t> generate(GptChunk& model, const std::vector<int32_t>& prompt, const SamplingOptions& options);

}  // namespace troupe
