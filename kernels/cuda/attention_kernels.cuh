// Internal interface between the CUDA attention files: the problem's dimensions, the
// launchers of the flash (tensor-core) and simple (fallback) kernels, and the backward's
// delta scratch. kernels/cuda/attention.cu picks a path; the kernels live in
//   attention_flash_forward.cu, attention_flash_backward.cu  (D = 64 or 128, mma.sync)
//   attention_simple.cu                                       (any D <= 256, one warp per row)
//   attention_delta.cu                                        (delta = rowsum(dout * out))
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cuda_state.cuh"

namespace troupe::cuda {

// A window no sequence reaches (T <= 2^18, so t + window and t - window never overflow):
// unbounded attention runs the windowed code with edges that never bind.
constexpr int kUnboundedWindow = 1 << 30;

// qkv [B, T, (H + 2G) * D] (per token: H query heads, G key heads, G value heads),
// out/dout [B, T, H * D], lse [B, H, T] f32. scale is resolved (never 0 here); query t sees
// keys [t - window + 1, t], window in [1, T) or kUnboundedWindow (never 0 here).
struct AttentionDims {
  int B, T, H, G, D;
  float scale;
  int window;

  __host__ __device__ int64_t qkv_stride() const { return int64_t(H + 2 * G) * D; }  // between tokens
  __host__ __device__ int64_t out_stride() const { return int64_t(H) * D; }
  __host__ __device__ int group_size() const { return H / G; }
  __host__ __device__ int key_slot(int g) const { return H + g; }  // head slots within a token row
  __host__ __device__ int value_slot(int g) const { return H + G + g; }
  __host__ __device__ int64_t token(int b, int t) const { return int64_t(b) * T + t; }
  // The first key query t sees, and one past the last query that sees key s.
  __host__ __device__ int first_key(int t) const { return t - window + 1 > 0 ? t - window + 1 : 0; }
  __host__ __device__ int query_end(int s) const { return s < T - window ? s + window : T; }
};

// Backward order: attention_delta writes delta[b, t, h] = rowsum(dout * out) as f32 into the
// first 4H bytes of token (b, t)'s query slot of dqkv (2HD bytes, D >= 2); the dk/dv kernel
// reads it there; the dq kernel then overwrites the query slot (it computes its own delta).
// This keeps backward free of allocations.
template <typename T>
__host__ __device__ inline float* delta_slot(T* dqkv, const AttentionDims& d, int b, int t) {
  return reinterpret_cast<float*>(dqkv + d.token(b, t) * d.qkv_stride());
}
template <typename T>
__host__ __device__ inline const float* delta_slot(const T* dqkv, const AttentionDims& d, int b, int t) {
  return reinterpret_cast<const float*>(dqkv + d.token(b, t) * d.qkv_stride());
}

// True for the head dims the flash kernels are built for (pointers must be 16-byte aligned).
bool flash_attention_supports(const AttentionDims& d);

template <typename T>
void flash_attention_forward(const CudaState& st, const AttentionDims& d, const T* qkv, T* out, float* lse);
template <typename T>
void flash_attention_backward_dkdv(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv,
                                   const float* lse, T* dqkv);
template <typename T>
void flash_attention_backward_dq(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv, const T* out,
                                 const float* lse, T* dqkv);

constexpr int kSimpleAttentionMaxHeadDim = 256;
template <typename T>
void simple_attention_forward(const CudaState& st, const AttentionDims& d, const T* qkv, T* out, float* lse);
template <typename T>
void simple_attention_backward_dkdv(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv,
                                    const float* lse, T* dqkv);
template <typename T>
void simple_attention_backward_dq(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv,
                                  const T* out, const float* lse, T* dqkv);

template <typename T>
void attention_delta(const CudaState& st, const AttentionDims& d, const T* dout, const T* out, T* dqkv);

}  // namespace troupe::cuda
