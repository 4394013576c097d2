// Context parallelism (Megatron's --context-parallel-size C, cp_comm_type p2p): every sample's
// sequence is cut into 2C equal chunks and context rank i holds chunks i and 2C-1-i (its local
// sequence: chunk i, then chunk 2C-1-i), which balances the causal mask's work. Everything but
// core attention is per token, so it runs on the local tokens as it is; core attention runs as
// a ring over the context group: the key/value chunks pass from rank to rank (C-1 steps), each
// step's blocks (full, causal diagonal, or skipped, by the chunks' global order) are merged into
// the running output (f32) with their log-sum-exp. Backward passes the keys/values around again,
// with their f32 gradient accumulators (which travel one step more, home).
//
// Each pass is posted before the step's blocks run, into a second buffer, so with a pass context
// (a second stream on the GPU) the transfer runs beside the attention; fences order the two
// streams (kernels/stream_fence.hpp). Without one the passes run on ctx, in turn with the blocks.
//
//   const ContextParallel cp{rank, C, context_group};
//   Tensor tokens = context_local_tokens(sample_tokens, cp);         // [B, T] -> [B, T / C]
//   context_attention_forward(ctx, cp, qkv, cfg, out, lse);          // qkv [B, T/C, (H+2G)*D]
//   context_attention_backward(ctx, cp, dout, qkv, out, lse, cfg, dqkv);
// Positions (RoPE, learned position embeddings) are the tokens' global ones:
// context_positions. CPU (f32) and CUDA (bf16/f16) devices (kernels/attention_block.hpp).
#pragma once

#include <cstdint>

#include "kernels/attention.hpp"
#include "kernels/collectives.hpp"
#include "kernels/context.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

struct ContextParallel {
  int rank = 0, size = 1;
  Collectives* comm = nullptr;  // the context group (needed when size > 1)
  // A context on the compute context's device whose stream carries the ring's passes (the
  // overlap); null: the passes run on the compute context. The caller keeps it alive.
  const Context* pass_ctx = nullptr;
  bool enabled() const { return size > 1; }
};

// The global position of local token t of a local sequence of `local_seq` tokens (T / C).
int64_t context_position(const ContextParallel& cp, int64_t local_seq, int64_t t);
// i32 [batch * local_seq] on ctx's device: every local token's global position.
Tensor context_positions(const Context& ctx, const ContextParallel& cp, int64_t batch, int64_t local_seq);
// This rank's tokens of host i32 [B, T] (tokens or targets): host i32 [B, T / C]. T must be a
// multiple of 2C (checked: names --seq-length and --context-parallel-size).
Tensor context_local_tokens(const Tensor& tokens, const ContextParallel& cp);
// Throws naming --seq-length and --context-parallel-size unless seq is a multiple of 2 * size.
void check_context_split(int64_t seq, int size);

// Causal attention of the local tokens against the whole sequence. qkv [B, Tl, (H+2G)*D] (after
// RoPE), out [B, Tl, H*D], lse f32 [B, H, Tl]: as attention_forward on the local tokens.
void context_attention_forward(const Context& ctx, const ContextParallel& cp, const Tensor& qkv,
                               const AttentionConfig& cfg, const Tensor& out, const Tensor& lse);
// dout [B, Tl, H*D] -> dqkv [B, Tl, (H+2G)*D] (overwritten), given the forward's out and lse.
void context_attention_backward(const Context& ctx, const ContextParallel& cp, const Tensor& dout, const Tensor& qkv,
                                const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, const Tensor& dqkv);

}  // namespace troupe
