// Context parallelism's block attention on cuDNN's fused attention (attention_cudnn.hpp): the
// SdpaShape of a block reads Q out of q [B, Tq, H*D] and K, V out of kv [B, Tk, 2*G*D] (keys,
// then values) through their row strides; the diagonal block is causal, the others unmasked.
#include <cstdint>

#include "kernels/cuda/attention_cudnn.hpp"
#include "kernels/cuda/attention_cudnn_sdpa.cuh"

namespace troupe::cuda {

namespace {

SdpaShape block_shape(const Tensor& q, const Tensor& kv, const AttentionConfig& cfg, BlockMask mask) {
  const int64_t H = cfg.n_heads, G = cfg.n_kv_heads, D = cfg.head_dim;
  SdpaShape s{};
  s.B = q.dim(0);
  s.Tq = q.dim(1);
  s.Tk = kv.dim(1);
  s.H = H;
  s.G = G;
  s.D = D;
  s.q_row = H * D;
  s.kv_row = 2 * G * D;
  s.io = cudnn_io_type(q.dtype());
  s.causal = mask == BlockMask::causal;
  s.window = false;  // refused by attention_block_*
  return s;
}

// The forward's views: Q in q, K then V in each row of kv; out and lse.
SdpaBuffers forward_buffers(const SdpaShape& s, const Tensor& q, const Tensor& kv, const Tensor& out,
                            const Tensor& lse) {
  SdpaBuffers b;
  b.q = q.data();
  b.k = kv.data();
  b.v = at_elements(kv, s.G * s.D);
  b.o = out.data();
  b.stats = lse.data_as<float>();
  return b;
}

}  // namespace

bool cudnn_attention_block_supports(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                                    std::initializer_list<const Tensor*> others, bool backward) {
  if (q.dtype() != DType::bf16 && q.dtype() != DType::f16) return false;
  if (cfg.head_dim != 64 && cfg.head_dim != 128) return false;
  if (backward && (q.dim(1) < 2 || kv.dim(1) < 2)) return false;  // cuDNN refuses a backward over one row
  // The values start G*D elements into each kv row: 16-byte aligned for these head dims.
  if (!aligned16(q) || !aligned16(kv)) return false;
  for (const Tensor* t : others)
    if (!aligned16(*t)) return false;
  return cudnn_sdpa_device_supported(ctx);
}

void cudnn_attention_block_forward(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                                   BlockMask mask, const Tensor& out, const Tensor& lse) {
  const SdpaShape s = block_shape(q, kv, cfg, mask);
  cudnn_sdpa_forward(ctx, s, forward_buffers(s, q, kv, out, lse), sdpa_scale(cfg), 0.0f);
}

void cudnn_attention_block_backward(const Context& ctx, const Tensor& dout, const Tensor& q, const Tensor& kv,
                                    const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, BlockMask mask,
                                    const Tensor& dq, const Tensor& dkv, bool deterministic) {
  const SdpaShape s = block_shape(q, kv, cfg, mask);
  SdpaBuffers b = forward_buffers(s, q, kv, out, lse);  // read by the backward
  b.dout = dout.data();
  b.dq = dq.data();
  b.dk = dkv.data();
  b.dv = at_elements(dkv, s.G * s.D);
  cudnn_sdpa_backward(ctx, s, b, sdpa_scale(cfg), 0.0f, deterministic);
}

}  // namespace troupe::cuda
