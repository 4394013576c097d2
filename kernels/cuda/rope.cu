#include "kernels/cuda/common.cuh"
#include "kernels/rope.hpp"

namespace troupe::cuda {

namespace {
constexpr int kThreads = 256;

// One thread per rotated pair (x[i], x[i + D/2]) of one query or key head of one token.
// Angles in f32 with precise powf/sincosf, matching the CPU reference.
template <typename T>
__global__ void rope_kernel(T* __restrict__ qkv, int64_t n_pairs, int64_t T_len, int rotated_heads, int D,
                            int64_t width, float base, RopeScaling scaling, int64_t pos_offset,
                            const int32_t* __restrict__ positions, float sign) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_pairs) return;
  const int half = D / 2;
  const int i = int(idx % half);
  const int64_t head_row = idx / half;  // (token, head)
  const int head = int(head_row % rotated_heads);
  const int64_t token = head_row / rotated_heads;
  const float pos = float(positions ? positions[token] : pos_offset + token % T_len);
  const float inv_freq = rope_inv_freq(i, D, base, scaling);
  float s, c;
  sincosf(pos * inv_freq, &s, &c);
  s *= sign;
  T* v = qkv + token * width + int64_t(head) * D;
  const float x1 = to_f32(v[i]), x2 = to_f32(v[i + half]);
  v[i] = from_f32<T>(x1 * c - x2 * s);
  v[i + half] = from_f32<T>(x2 * c + x1 * s);
}
}  // namespace

void rope_apply(const Context& ctx, const Tensor& qkv, const Tensor& positions, const RopeConfig& cfg, bool inverse) {
  const int rotated_heads = cfg.n_heads + cfg.n_kv_heads;
  const int64_t n_pairs = qkv.dim(0) * qkv.dim(1) * rotated_heads * (cfg.head_dim / 2);
  if (n_pairs == 0) return;
  dispatch_float(qkv.dtype(), "rope_apply", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<ceil_div(n_pairs, kThreads), kThreads, 0, stream_of(ctx)>>>(
        qkv.data_as<T>(), n_pairs, qkv.dim(1), rotated_heads, cfg.head_dim, qkv.dim(2), cfg.base, cfg.scaling,
        cfg.pos_offset, positions.defined() ? positions.data_as<int32_t>() : nullptr, inverse ? -1.0f : 1.0f);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
