// Attention of one block of queries against one block of keys/values, for context
// parallelism's ring (model/context_parallel.hpp): a sequence is cut into chunks, and the
// attention of a query chunk is the merge of its blocks against every key chunk at or before it
// (Megatron's ring attention, flash-attention's per-block log-sum-exp merge).
//
// q [B, Tq, H*D] (H query heads, D contiguous values each); kv [B, Tk, 2*G*D]: G key heads,
// then G value heads. Query head h reads key/value head h / (H / G), as attention.hpp.
// mask: full (every query sees every key: a key chunk before the query chunk) or causal (the
// diagonal block, Tq == Tk: query i sees keys j <= i). A key chunk after the query chunk is
// skipped by the caller. Sliding windows are refused (cfg.window must be 0).
//
// The running output and the gradient accumulators are f32 on every device, rounded to the
// activations' dtype once, by the caller, after the last block:
//   // acc f32 [B, Tq, H*D], lse f32 [B, H, Tq] filled with -inf: no key seen yet
//   attention_block_forward(ctx, q, kv0, cfg, BlockMask::causal, part, part_lse);   // the diagonal
//   attention_block_merge(ctx, acc, lse, part, part_lse);                          // acc, lse: block 0
//   attention_block_forward(ctx, q, kv1, cfg, BlockMask::full, part, part_lse);
//   attention_block_merge(ctx, acc, lse, part, part_lse);                          // acc, lse: both
//   convert(ctx, acc, out);
// Backward takes the FINAL out and lse (after every merge, out in the activations' dtype), as
// flash-attention's does, and adds this block's share into f32 dq and dkv:
//   attention_block_backward(ctx, dout, q, kv1, out, lse, cfg, BlockMask::full, dq, dkv1);
//
// CPU: every tensor f32. CUDA: q, kv, a block's out, the final out and dout in bf16 or f16 (one
// dtype); lse, the running out, dq and dkv in f32. cuDNN's fused attention runs the blocks it
// covers (head_dim 64 or 128, kernels/cuda/attention_cudnn.hpp), warp-per-row kernels the rest
// (kernels/cuda/attention_block.cu, head_dim up to 256).
#pragma once

#include "kernels/attention.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

enum class BlockMask { full, causal };

// out [B, Tq, H*D] (q's dtype) and lse f32 [B, H, Tq] (overwritten): softmax over this block's keys only.
void attention_block_forward(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                             BlockMask mask, const Tensor& out, const Tensor& lse);
// (out, lse) <- the merge of (out, lse) and (block_out, block_lse): the attention over the keys
// of both. out is f32; block_out is a forward's (q's dtype). An lse of -inf marks a row that has
// seen no key yet (its out is then ignored, whatever it holds).
void attention_block_merge(const Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& block_out,
                           const Tensor& block_lse);
// dout, out [B, Tq, H*D] (q's dtype), lse [B, H, Tq]: the final output's gradient, output and lse.
// dq [B, Tq, H*D] and dkv [B, Tk, 2*G*D], f32, ACCUMULATE (+=) this block's contributions.
void attention_block_backward(const Context& ctx, const Tensor& dout, const Tensor& q, const Tensor& kv,
                              const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, BlockMask mask,
                              const Tensor& dq, const Tensor& dkv);

namespace cpu {
void attention_block_forward(const Tensor& q, const Tensor& kv, const AttentionConfig& cfg, BlockMask mask,
                             const Tensor& out, const Tensor& lse);
void attention_block_merge(const Tensor& out, const Tensor& lse, const Tensor& block_out, const Tensor& block_lse);
void attention_block_backward(const Tensor& dout, const Tensor& q, const Tensor& kv, const Tensor& out,
                              const Tensor& lse, const AttentionConfig& cfg, BlockMask mask, const Tensor& dq,
                              const Tensor& dkv);
}  // namespace cpu
namespace cuda {
void attention_block_forward(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                             BlockMask mask, const Tensor& out, const Tensor& lse);
void attention_block_merge(const Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& block_out,
                           const Tensor& block_lse);
void attention_block_backward(const Context& ctx, const Tensor& dout, const Tensor& q, const Tensor& kv,
                              const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, BlockMask mask,
                              const Tensor& dq, const Tensor& dkv);
}  // namespace cuda

}  // namespace troupe
