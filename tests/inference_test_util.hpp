// Helpers shared by the inference tests (paged attention, inference model, engine).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/config.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::test {

// A 2-layer model with 4 heads: GPT-2 (LayerNorm, learned positions, GELU, biases, tied) or
// Llama-style (RMSNorm, RoPE, SwiGLU with F = 3/2 hidden, 2 query groups, no biases, untied).
// The vocabulary is padded to a multiple of 8.
GptConfig tiny_inference_config(bool llama, int hidden, int seq_length, int64_t vocab);
// The Llama-style one with Qwen3's q/k norms, a head dimension of hidden / 2 (twice hidden /
// heads, as Qwen3-0.6B's) and a tied output layer.
GptConfig tiny_qwen3_inference_config(int hidden, int seq_length, int64_t vocab);
// n token ids in [0, vocab).
std::vector<int32_t> random_token_list(int64_t n, uint64_t seed, int32_t vocab);
// A host i32 tensor holding `values`.
Tensor host_i32(const std::vector<int32_t>& values, Shape shape);

// One sequence of a mixed batch (run_mixed_batch): `cached` tokens already in the cache (0: none),
// `fresh` new tokens in the mixed forward.
struct MixedSequence {
  int64_t cached = 0, fresh = 0;
};
// Prefills every sequence's cached tokens (one forward of the sequences that have some), then
// runs one forward of every sequence's new tokens together (fresh prefills, decode rows and
// prefill chunks continuing a cache, as `seqs` says), then `decode_steps` decode steps of all of
// them. Random tokens below 1000 from `seed`, a cache of blocks of 16. Returns each forward's
// logits, host f32 [S', Vp].
std::vector<Tensor> run_mixed_batch(InferenceModel& model, const std::vector<MixedSequence>& seqs, int decode_steps,
                                    uint64_t seed);

// What the engine generated for one request: its tokens and their log-probs.
struct EngineOutcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};
// Runs `requests` together through an engine over `ranks` (one model, or a tensor-parallel
// group's models in rank order); expects every KV block back at the end.
std::vector<EngineOutcome> run_engine(std::vector<InferenceModel*> ranks,
                                      const std::vector<GenerationRequest>& requests);
// Five requests of 1 to 11 prompt tokens (ids below 50) generating 4 to 8 tokens with log-probs:
// greedy, or sampled with seeds (plain, top-k, top-p).
std::vector<GenerationRequest> engine_requests(bool greedy);
// Expects the same tokens per request (and as many log-probs); returns the largest |log-prob difference|.
double expect_same_tokens(const std::vector<EngineOutcome>& got, const std::vector<EngineOutcome>& ref);

}  // namespace troupe::test
