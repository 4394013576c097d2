// Fallback attention for head dims without a flash kernel (any D <= 256): one warp per query
// row (forward, dq) or key row (dk/dv), lane i holding dims i, i + 32, ... in f32, keys and
// values streamed from global memory (L2). Memory-efficient like the flash kernels (online
// softmax, probabilities rebuilt from lse), but on CUDA cores and far slower. A sliding window
// bounds each row's loop: query t reads keys [first_key(t), t], key s queries [s, query_end(s)).
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/warp_row.cuh"

namespace troupe::cuda {

namespace {

constexpr int kWarps = 4;

template <typename T>
__global__ void simple_forward_kernel(const T* __restrict__ qkv, T* __restrict__ out, float* __restrict__ lse,
                                      AttentionDims dims) {
  const int t = blockIdx.y * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= dims.T) return;
  const int b = blockIdx.x / dims.H, h = blockIdx.x % dims.H, g = h / dims.group_size(), D = dims.D;
  const int64_t ld = dims.qkv_stride();
  const T* seq = qkv + dims.token(b, 0) * ld;
  WarpRow q, acc;
  q.load(seq + t * ld + int64_t(h) * D, D, lane);
  acc.fill(0.0f);
  float m = -INFINITY, sum = 0.0f;
  for (int k = dims.first_key(t); k <= t; ++k) {
    const float s = q.dot(seq + k * ld + int64_t(dims.key_slot(g)) * D, D, lane) * dims.scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new), p = expf(s - m_new);
    sum = sum * correction + p;
    acc.scale_add(correction, p, seq + k * ld + int64_t(dims.value_slot(g)) * D, D, lane);
    m = m_new;
  }
  acc.store(out + dims.token(b, t) * dims.out_stride() + int64_t(h) * D, 1.0f / sum, D, lane);
  if (lane == 0) lse[(int64_t(b) * dims.H + h) * dims.T + t] = m + logf(sum);
}

// dq_t = scale sum_k dS_tk k_k, one warp per query row.
template <typename T>
__global__ void simple_dq_kernel(const T* __restrict__ dout, const T* __restrict__ qkv, const T* __restrict__ out,
                                 const float* __restrict__ lse, T* __restrict__ dqkv, AttentionDims dims) {
  const int t = blockIdx.y * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= dims.T) return;
  const int b = blockIdx.x / dims.H, h = blockIdx.x % dims.H, g = h / dims.group_size(), D = dims.D;
  const int64_t ld = dims.qkv_stride();
  const T* seq = qkv + dims.token(b, 0) * ld;
  const int64_t out_at = dims.token(b, t) * dims.out_stride() + int64_t(h) * D;
  WarpRow q, dy, dq;
  q.load(seq + t * ld + int64_t(h) * D, D, lane);
  dy.load(dout + out_at, D, lane);
  dq.fill(0.0f);
  const float delta = dy.dot(out + out_at, D, lane);
  const float lse_t = lse[(int64_t(b) * dims.H + h) * dims.T + t];
  for (int k = dims.first_key(t); k <= t; ++k) {
    const T* key = seq + k * ld + int64_t(dims.key_slot(g)) * D;
    const float p = expf(q.dot(key, D, lane) * dims.scale - lse_t);
    const float dp = dy.dot(seq + k * ld + int64_t(dims.value_slot(g)) * D, D, lane);
    dq.scale_add(1.0f, p * (dp - delta), key, D, lane);
  }
  dq.store(dqkv + dims.token(b, t) * ld + int64_t(h) * D, dims.scale, D, lane);
}

// dk_s, dv_s summed over the group's query heads and the queries t in [s, query_end(s)), one
// warp per key row.
// Reads delta from the delta slot of dqkv.
template <typename T>
__global__ void simple_dkdv_kernel(const T* __restrict__ dout, const T* __restrict__ qkv, const float* __restrict__ lse,
                                   T* __restrict__ dqkv, AttentionDims dims) {
  const int s = blockIdx.y * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (s >= dims.T) return;
  const int b = blockIdx.x / dims.G, g = blockIdx.x % dims.G, D = dims.D;
  const int64_t ld = dims.qkv_stride();
  const T* seq = qkv + dims.token(b, 0) * ld;
  WarpRow key, value, dk, dv;
  key.load(seq + s * ld + int64_t(dims.key_slot(g)) * D, D, lane);
  value.load(seq + s * ld + int64_t(dims.value_slot(g)) * D, D, lane);
  dk.fill(0.0f);
  dv.fill(0.0f);
  const int t_end = dims.query_end(s);
  for (int h = g * dims.group_size(); h < (g + 1) * dims.group_size(); ++h) {
    for (int t = s; t < t_end; ++t) {
      const T* q = seq + t * ld + int64_t(h) * D;
      const T* dy = dout + dims.token(b, t) * dims.out_stride() + int64_t(h) * D;
      const float p = expf(key.dot(q, D, lane) * dims.scale - lse[(int64_t(b) * dims.H + h) * dims.T + t]);
      const float dp = value.dot(dy, D, lane);
      const float delta = delta_slot(static_cast<const T*>(dqkv), dims, b, t)[h];
      dv.scale_add(1.0f, p, dy, D, lane);
      dk.scale_add(1.0f, p * (dp - delta), q, D, lane);
    }
  }
  T* dseq = dqkv + dims.token(b, 0) * ld;
  dk.store(dseq + s * ld + int64_t(dims.key_slot(g)) * D, dims.scale, D, lane);
  dv.store(dseq + s * ld + int64_t(dims.value_slot(g)) * D, 1.0f, D, lane);
}

void check_head_dim(const char* op, const AttentionDims& d) {
  TROUPE_CHECK(d.D <= kSimpleAttentionMaxHeadDim, op, ": CUDA attention supports head_dim up to ",
               kSimpleAttentionMaxHeadDim, ", got ", d.D);
}

}  // namespace

template <typename T>
void simple_attention_forward(const CudaState& st, const AttentionDims& d, const T* qkv, T* out, float* lse) {
  check_head_dim("attention_forward", d);
  const dim3 grid(unsigned(d.B * d.H), ceil_div(d.T, kWarps));
  simple_forward_kernel<T><<<grid, 32 * kWarps, 0, st.stream>>>(qkv, out, lse, d);
  TROUPE_CUDA_CHECK_LAUNCH();
}

template <typename T>
void simple_attention_backward_dkdv(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv,
                                    const float* lse, T* dqkv) {
  check_head_dim("attention_backward", d);
  const dim3 grid(unsigned(d.B * d.G), ceil_div(d.T, kWarps));
  simple_dkdv_kernel<T><<<grid, 32 * kWarps, 0, st.stream>>>(dout, qkv, lse, dqkv, d);
  TROUPE_CUDA_CHECK_LAUNCH();
}

template <typename T>
void simple_attention_backward_dq(const CudaState& st, const AttentionDims& d, const T* dout, const T* qkv,
                                  const T* out, const float* lse, T* dqkv) {
  check_head_dim("attention_backward", d);
  const dim3 grid(unsigned(d.B * d.H), ceil_div(d.T, kWarps));
  simple_dq_kernel<T><<<grid, 32 * kWarps, 0, st.stream>>>(dout, qkv, out, lse, dqkv, d);
  TROUPE_CUDA_CHECK_LAUNCH();
}

#define TROUPE_INSTANTIATE(T)                                                                                         \
  template void simple_attention_forward<T>(const CudaState&, const AttentionDims&, const T*, T*, float*);            \
  template void simple_attention_backward_dkdv<T>(const CudaState&, const AttentionDims&, const T*, const T*,         \
                                                  const float*, T*);                                                  \
  template void simple_attention_backward_dq<T>(const CudaState&, const AttentionDims&, const T*, const T*, const T*, \
                                                const float*, T*);
TROUPE_INSTANTIATE(__nv_bfloat16)
TROUPE_INSTANTIATE(__half)
#undef TROUPE_INSTANTIATE

}  // namespace troupe::cuda
