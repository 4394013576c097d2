// Causal attention on cuDNN 9's fused flash-attention graphs (its SDPA engines), the default CUDA
// backend for attention_forward / attention_backward, beside Troupe's own flash kernels.
//
// Which one runs: TROUPE_ATTENTION_BACKEND=cudnn (the default: faster on Hopper), flash (ours), or
// cudnn-deterministic (cuDNN's backward without atomics: bit-identical reruns, more workspace).
// Shapes the cuDNN graphs do not cover (head dim other than 64 or 128, unaligned tensors, a GPU
// older than sm_80, T = 1 backward) run ours, silently; a cuDNN failure on a covered shape is an
// error, not a fallback. Tests and benchmarks pick a backend in code:
//
//   troupe::cuda::ScopedAttentionBackend use(troupe::cuda::AttentionBackend::cudnn);
//   troupe::attention_forward(gpu, qkv, cfg, out, lse);   // cuDNN, whatever the environment says
//
// cuDNN reads Q, K and V straight out of the fused qkv [B, T, (H + 2G) D] through strides and
// writes dq, dk and dv into dqkv the same way; lse [B, H, T] is cuDNN's softmax "stats" output
// (max + log of the sum of exp of the scaled scores: the natural-log log-sum-exp). Execution plans
// are built once per shape and cached in the CUDA context with its cuDNN handle and workspace.
// Plain C++ (no device code), so tests and benchmarks can include it.
#pragma once

#include <initializer_list>
#include <string_view>

#include "kernels/attention.hpp"
#include "kernels/attention_block.hpp"

namespace troupe::cuda {

enum class AttentionBackend { flash, cudnn, cudnn_deterministic };

const char* attention_backend_name(AttentionBackend backend);  // the TROUPE_ATTENTION_BACKEND spelling
// "flash", "cudnn" or "cudnn-deterministic"; anything else throws naming TROUPE_ATTENTION_BACKEND
// and the allowed values.
AttentionBackend parse_attention_backend(std::string_view value);
// The backend CUDA attention uses now: a ScopedAttentionBackend's if one is alive, else
// TROUPE_ATTENTION_BACKEND's (read at each call), else cudnn.
AttentionBackend attention_backend();

// Overrides the backend (for the whole process) while it lives; restores the previous override.
class ScopedAttentionBackend {
 public:
  explicit ScopedAttentionBackend(AttentionBackend backend);
  ~ScopedAttentionBackend();
  ScopedAttentionBackend(const ScopedAttentionBackend&) = delete;
  ScopedAttentionBackend& operator=(const ScopedAttentionBackend&) = delete;

 private:
  int previous_;
};

// The cuDNN version loaded at run time (cudnnGetVersion: 91900 for 9.19.0), and the oldest the
// attention graphs accept.
int cudnn_runtime_version();
int cudnn_min_attention_version();

// True when the cuDNN graphs cover this call: bf16 or f16, head dim 64 or 128, every tensor
// (qkv and `others`) 16-byte aligned, a GPU of compute capability 8.0 or newer, and for the
// backward T > 1. Arguments are assumed checked by attention_forward / attention_backward.
bool cudnn_attention_supports(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg,
                              std::initializer_list<const Tensor*> others, bool backward);

// The cuDNN paths; callers check cudnn_attention_supports first. Both fail (troupe::Error) when
// the loaded cuDNN is older than cudnn_min_attention_version() or cuDNN refuses the graph.
void cudnn_attention_forward(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                             const Tensor& lse);
// deterministic: cuDNN's dP-workspace backward (dq written without atomics; B H T^2 bf16 of
// workspace) instead of the default one that accumulates dq in f32 with atomics.
void cudnn_attention_backward(const Context& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, const AttentionConfig& cfg, const Tensor& dqkv, bool deterministic);

// Context parallelism's blocks (kernels/attention_block.hpp) on the same graphs: q [B, Tq, H*D]
// and kv [B, Tk, 2*G*D] (keys, then values) read through strides; a causal block (the diagonal,
// Tq == Tk) masks keys after the query, a full one masks nothing. Covered: bf16 or f16, head dim
// 64 or 128, every tensor (q, kv and `others`) 16-byte aligned, sm_80+, and for the backward
// Tq, Tk > 1. Arguments are assumed checked by attention_block_forward / _backward.
bool cudnn_attention_block_supports(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                                    std::initializer_list<const Tensor*> others, bool backward);
// out [B, Tq, H*D] (q's dtype) and lse f32 [B, H, Tq], overwritten: this block's softmax only.
void cudnn_attention_block_forward(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                                   BlockMask mask, const Tensor& out, const Tensor& lse);
// From the FINAL out and lse (after every merge): this block's dq [B, Tq, H*D] and dkv
// [B, Tk, 2*G*D], in q's dtype, OVERWRITTEN (the caller adds them up).
void cudnn_attention_block_backward(const Context& ctx, const Tensor& dout, const Tensor& q, const Tensor& kv,
                                    const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, BlockMask mask,
                                    const Tensor& dq, const Tensor& dkv, bool deterministic);

}  // namespace troupe::cuda
