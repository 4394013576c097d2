// Greedy decoding on the device: for each row of logits [S, Vp], the index of its largest value
// among the first `vocab` columns (the lowest index on ties, as torch.argmax and std::max_element)
// and the log-softmax at that index, -log(sum_j exp(x_j - max)) over the same columns. The
// inference engine copies these 2*S numbers to the host instead of the S x Vp logits.
// `maxes`, when given, receives each row's largest value: with it a tensor-parallel group
// merges its ranks' vocabulary slices (global max, and log-sum-exp = max - logprob per rank).
//
//   argmax_logprob(ctx, logits, vocab, tokens, logprobs);   // tokens i32 [S], logprobs f32 [S]
//   argmax_logprob(ctx, logits, vocab, tokens, logprobs, maxes);  // maxes f32 [S]
//
// CPU: f32 logits, the sum in f64. CUDA: bf16, f16 or f32 logits, the sum in f32.
#pragma once

#include <cstdint>

#include "kernels/tensor.hpp"

namespace troupe {

void argmax_logprob(const Context& ctx, const Tensor& logits, int64_t vocab, const Tensor& tokens,
                    const Tensor& logprobs, const Tensor& maxes = Tensor());

namespace cpu {
void argmax_logprob(const Tensor& logits, int64_t vocab, const Tensor& tokens, const Tensor& logprobs,
                    const Tensor& maxes);
}  // namespace cpu
namespace cuda {
void argmax_logprob(const Context& ctx, const Tensor& logits, int64_t vocab, const Tensor& tokens,
                    const Tensor& logprobs, const Tensor& maxes);
}  // namespace cuda

}  // namespace troupe
