// cuDNN's fused attention (SDPA) graphs for the two CUDA callers: whole-sequence causal attention
// on a fused qkv (attention_cudnn.cu) and context parallelism's blocks on separate q and kv
// (attention_cudnn_block.cu). A shape says where the rows of Q, K and V are (their strides) and
// which mask applies; one builder makes the graphs (attention_cudnn.cu), and each plan is built
// once per shape and cached in the context with its cuDNN handle and workspace.
//
//   const SdpaShape s{B, T, T, H, G, D, C3, C3, CUDNN_DATA_BFLOAT16, /*causal=*/true, /*window=*/false};
//   SdpaBuffers b;
//   b.q = qkv; b.k = qkv + H*D; b.v = qkv + (H+G)*D; b.o = out; b.stats = lse;   // element offsets
//   cudnn_sdpa_forward(ctx, s, b, scale, 0.0f);
//
// Included by .cu files of the cuDNN build only.
#pragma once

#include <cudnn.h>

#include <cstdint>

#include "kernels/attention.hpp"

namespace troupe::cuda {

// The views cuDNN reads and writes ([batch, heads, rows, cols] with strides into our buffers):
//   Q, dQ    [B, H, Tq, D]  strides [Tq q_row, D, q_row, 1]
//   K, dK    [B, G, Tk, D]  strides [Tk kv_row, D, kv_row, 1]   (K^T: the last two swapped)
//   V, dV    like K
//   O, dO    [B, H, Tq, D]  strides [Tq H D, D, H D, 1]          (packed [B, Tq, H*D])
//   stats    [B, H, Tq, 1] f32                                   (packed [B, H, Tq])
struct SdpaShape {
  int64_t B, Tq, Tk, H, G, D;
  int64_t q_row, kv_row;  // elements from one token's row to the next: of Q (and dQ), of K, V (and dK, dV)
  cudnnDataType_t io;     // bf16 or f16
  bool causal;            // query i sees keys j <= i (top-left diagonal, Tq == Tk); else every key
  bool window;            // (causal only) also j > i - W, W passed by value at each call
};

// Device pointers of one call (each view's first element). Forward reads q, k, v and writes o
// and stats; backward reads q, k, v, o, dout and stats and writes (overwrites) dq, dk, dv.
struct SdpaBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* dout = nullptr;
  void* o = nullptr;
  float* stats = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

// The address `offset` elements into t (a view's first element), and whether t's data is
// 16-byte aligned, as the graphs declare every tensor.
inline void* at_elements(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data()) + offset * int64_t(dtype_size(t.dtype()));
}
inline bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

cudnnDataType_t cudnn_io_type(DType t);
// cfg.scale, or 1/sqrt(D) when it is 0.
float sdpa_scale(const AttentionConfig& cfg);
// True on a GPU cuDNN's fused attention runs on (compute capability 8.0 or newer).
bool cudnn_sdpa_device_supported(const Context& ctx);
// Both fail (troupe::Error) when the loaded cuDNN is older than cudnn_min_attention_version() or
// cuDNN refuses the graph; `window` is W when s.window.
void cudnn_sdpa_forward(const Context& ctx, const SdpaShape& s, const SdpaBuffers& b, float scale, float window);
// deterministic: cuDNN's dP-workspace backward (dq without atomics) instead of the f32 atomic one.
void cudnn_sdpa_backward(const Context& ctx, const SdpaShape& s, const SdpaBuffers& b, float scale, float window,
                         bool deterministic);

}  // namespace troupe::cuda
