// Causal self-attention with grouped-query heads over a fused QKV activation.
//
// Layout of qkv [B, T, (H + 2G) * D] per token: H query heads, then G key heads, then G
// value heads, each D contiguous values. Query head h reads key/value head h / (H / G).
// out [B, T, H * D]: head h at columns [h*D, (h+1)*D) (ready for the output projection).
//   out_h = softmax(q_h k_g^T * scale + causal mask) v_g,   scale = 1/sqrt(D)
// lse [B, H, T] f32 keeps each row's log-sum-exp of the scaled scores, so backward can
// rebuild the probabilities without storing the T x T matrix (flash-attention style).
//
// Sliding window (Mistral, Qwen's use_sliding_window): with window = W > 0, query i sees key j
// iff i - W < j <= i, W keys counting itself (HF's sliding-window causal mask; Megatron's
// window_size = (W - 1, 0)). Work is O(T W) instead of O(T^2); W >= T is unbounded attention.
//   AttentionConfig cfg{H, G, D};  cfg.window = 4096;
//   attention_forward(ctx, qkv, cfg, out, lse);
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

struct AttentionConfig {
  int n_heads = 0;     // H
  int n_kv_heads = 0;  // G, divides H
  int head_dim = 0;    // D
  float scale = 0.0f;  // 0 means 1/sqrt(D)
  int window = 0;      // W: query i sees keys (i - W, i]; 0 means unbounded (all keys <= i)
};

void attention_forward(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                       const Tensor& lse);
// attention_forward on kernels that need no set-up per shape: on CUDA our flash kernels even where
// cuDNN is the backend. cuDNN builds (and keeps) a plan for every new T, 60-450 ms on an H100,
// and an inference prefill meets a new prompt length on most requests. The CPU has one kernel.
void attention_forward_any_length(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                                  const Tensor& lse);
// True when attention_forward runs `dtype` at this head dim on its fast kernels: on CUDA bf16 or
// f16 with head dim 64 or 128 (cuDNN's fused kernels or our flash ones, on tensor cores; other
// head dims run simple CUDA-core kernels, f32 is refused); on the CPU f32 (its one kernel). For
// callers with another way to the same result (an inference prefill, paged attention).
bool attention_forward_fast(const Context& ctx, DType dtype, int head_dim);
// dout [B, T, H*D] -> dqkv [B, T, (H + 2G) * D] (overwrite). Needs the forward's out and lse.
void attention_backward(const Context& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionConfig& cfg, const Tensor& dqkv);

namespace cpu {
void attention_forward(const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out, const Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionConfig& cfg, const Tensor& dqkv);
}  // namespace cpu
namespace cuda {
bool attention_forward_fast(DType dtype, int head_dim);
// allow_cudnn false: never cuDNN (attention_forward_any_length).
void attention_forward(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                       const Tensor& lse, bool allow_cudnn = true);
void attention_backward(const Context& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionConfig& cfg, const Tensor& dqkv);
}  // namespace cuda

}  // namespace troupe
