// Text generation without a KV cache: each new token re-runs the forward over a fixed
// [1, seq_length] window (the prompt left-aligned, the rest padding that causal attention
// never lets the real positions see) and picks the next token from the last real position's
// logits with the serving engine's TokenSampler (sampling.hpp), so both paths choose tokens
// the same way. Quadratic in length; meant for a quick sample after training, not for serving.
//
//   const std::vector<int32_t> text = generate(chunk, prompt, training_sample_params(64, seed));
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt_chunk.hpp"
#include "model/inference/sampling.hpp"

namespace troupe {

// The sample printed after training (`--sample-tokens`): temperature 0.8, top-k 40.
SamplingParams training_sample_params(int64_t max_tokens, uint64_t seed);

// Returns only the new tokens: params.max_tokens of them, fewer when one of params.stop_tokens
// is generated (it is returned). Stop strings and log-probabilities are the engine's.
std::vector<int32_t> generate(GptChunk& model, const std::vector<int32_t>& prompt, const SamplingParams& params);

}  // namespace troupe
