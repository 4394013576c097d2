// Attention over a paged KV cache, for inference: a batch of sequences of different lengths,
// each with some new query tokens (a prefill: many; a decode step: one), flattened into N rows.
//
// The cache of one layer is two tensors k_cache, v_cache [num_blocks, block_size, G, D]
// (G = key/value heads = query groups). A sequence owns a list of blocks (its block table):
// its token at position p lives in slot block_table[p / block_size] * block_size + p % block_size.
//
//   paged_kv_append(ctx, qkv, cfg, slots, k_cache, v_cache);      // the new tokens' K and V
//   paged_attention(ctx, qkv, cfg, batch, k_cache, v_cache, out);  // their attention outputs
//   paged_append_attention(ctx, qkv, cfg, slots, batch, k_cache, v_cache, out);  // both, one launch
//
// qkv [N, (H + 2G) * D] is the fused projection (attention.hpp's layout, RoPE already applied).
// New token j of sequence s (of n_s new tokens) sits at position seq_lens[s] - n_s + j and attends
// causally to positions 0..that one; query head h reads kv head h / (H / G). With window = W > 0
// (sliding-window attention, as attention.hpp) a row at position p sees only positions
// p - W + 1..p; cache blocks wholly before every new row's window are never read, so their
// block-table entries may be anything (-1 included).
// CPU: f32. CUDA: bf16, f16 or f32 qkv and cache, f32 accumulation.
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

struct PagedAttentionConfig {
  int n_heads = 0;     // H
  int n_kv_heads = 0;  // G, divides H
  int head_dim = 0;    // D
  int block_size = 0;  // tokens per cache block
  float scale = 0.0f;  // 0 means 1/sqrt(D)
  int window = 0;      // W: a row at position p sees positions (p - W, p]; 0 means unbounded
};

// Where the rows of a flattened batch of S sequences come from. All i32, on ctx's device.
struct PagedBatch {
  Tensor query_start;   // [S + 1] ascending: sequence s's new tokens are rows [query_start[s], query_start[s+1])
  Tensor seq_lens;      // [S] tokens of s in the cache, its new ones included
  Tensor block_tables;  // [S, max_blocks] block ids (entries past a sequence's blocks unused)
};

// slots i32 [N]: cache slot of each row's token. Writes its K and V heads into the caches.
void paged_kv_append(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots,
                     const Tensor& k_cache, const Tensor& v_cache);
// out [N, H * D] (overwritten). The new tokens' K/V must be appended first.
void paged_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const PagedBatch& batch,
                     const Tensor& k_cache, const Tensor& v_cache, const Tensor& out);
// paged_kv_append then paged_attention, with the same results; on CUDA one kernel (the rows'
// own keys are read from qkv). The rows must be every new token of the batch's sequences.
void paged_append_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots,
                            const PagedBatch& batch, const Tensor& k_cache, const Tensor& v_cache, const Tensor& out);

namespace cpu {
void paged_kv_append(const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots, const Tensor& k_cache,
                     const Tensor& v_cache);
void paged_attention(const Tensor& qkv, const PagedAttentionConfig& cfg, const PagedBatch& batch, const Tensor& k_cache,
                     const Tensor& v_cache, const Tensor& out);
}  // namespace cpu
namespace cuda {
void paged_kv_append(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots,
                     const Tensor& k_cache, const Tensor& v_cache);
void paged_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const PagedBatch& batch,
                     const Tensor& k_cache, const Tensor& v_cache, const Tensor& out);
void paged_append_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots,
                            const PagedBatch& batch, const Tensor& k_cache, const Tensor& v_cache, const Tensor& out);
}  // namespace cuda

}  // namespace troupe
