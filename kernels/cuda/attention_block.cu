// CUDA block attention for context parallelism's ring (kernels/attention_block.hpp): q and kv
// as separate tensors, a full or causal (diagonal) block, the lse of the scaled scores, and a
// backward from the FINAL out and lse that adds into f32 dq and dkv.
//
// cuDNN's fused attention is meant to run the blocks it covers (switched off for now: see
// use_cudnn) (attention_cudnn.hpp: head dim 64 or 128,
// aligned tensors, sm_80+, TROUPE_ATTENTION_BACKEND not flash); its backward writes the block's
// gradients in q's dtype into stream-ordered scratch, added into the f32 accumulators here.
// Everything else runs the warp-per-row kernels below, those of attention_simple.cu (CUDA cores,
// online softmax, probabilities rebuilt from lse) written for two tensors and both masks:
// correct for any D <= 256 and any alignment, slower than tensor-core kernels. Each warp owns
// the row it writes, so dq and dk/dv accumulate in place without atomics or scratch.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "kernels/attention_block.hpp"
#include "kernels/cuda/attention_cudnn.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/stream_buffer.cuh"
#include "kernels/cuda/warp_row.cuh"
#include "kernels/nvtx.hpp"

namespace troupe::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = kSimpleAttentionMaxHeadDim;

// q/out/dout/dq [B, Tq, H*D]; kv/dkv [B, Tk, 2*G*D] (G key heads, then G value heads);
// lse [B, H, Tq] f32.
struct BlockDims {
  int B, Tq, Tk, H, G, D;
  float scale;
  bool causal;

  __device__ int64_t q_at(int b, int t, int h) const { return (int64_t(b) * Tq + t) * H * D + int64_t(h) * D; }
  __device__ int64_t key_at(int b, int s, int g) const { return (int64_t(b) * Tk + s) * 2 * G * D + int64_t(g) * D; }
  __device__ int64_t value_at(int b, int s, int g) const { return key_at(b, s, G + g); }
  __device__ int64_t lse_at(int b, int h, int t) const { return (int64_t(b) * H + h) * Tq + t; }
  __device__ int group_size() const { return H / G; }
  // Query t sees keys [0, key_end(t)); key s is seen by queries [query_begin(s), Tq).
  __device__ int key_end(int t) const { return causal ? t + 1 : Tk; }
  __device__ int query_begin(int s) const { return causal ? s : 0; }
};

// One warp per query row (b, h, t): online softmax over the row's visible keys.
template <typename T>
__global__ void block_forward_kernel(const T* __restrict__ q, const T* __restrict__ kv, T* __restrict__ out,
                                     float* __restrict__ lse, BlockDims d) {
  const int t = blockIdx.y * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= d.Tq) return;
  const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, g = h / d.group_size();
  WarpRow qr, acc;
  qr.load(q + d.q_at(b, t, h), d.D, lane);
  acc.fill(0.0f);
  float m = -INFINITY, sum = 0.0f;
  for (int s = 0; s < d.key_end(t); ++s) {
    const float score = qr.dot(kv + d.key_at(b, s, g), d.D, lane) * d.scale;
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new), p = expf(score - m_new);
    sum = sum * correction + p;
    acc.scale_add(correction, p, kv + d.value_at(b, s, g), d.D, lane);
    m = m_new;
  }
  // A row without keys (Tk == 0 on a full block) keeps out = 0 and lse = -inf: merges skip it.
  acc.store(out + d.q_at(b, t, h), sum > 0.0f ? 1.0f / sum : 0.0f, d.D, lane);
  if (lane == 0) lse[d.lse_at(b, h, t)] = sum > 0.0f ? m + logf(sum) : -INFINITY;
}

// One warp per row (b, t, h) of out (f32): with m = max(la, lb), lse = m + log(e^(la-m) + e^(lb-m)),
// out = e^(la-lse) out + e^(lb-lse) block_out. The kernels/cpu/attention_block.cpp formula.
template <typename T>
__global__ void block_merge_kernel(float* __restrict__ out, float* __restrict__ lse, const T* __restrict__ block_out,
                                   const float* __restrict__ block_lse, int B, int T_, int H, int D) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(B) * T_ * H) return;
  const int h = int(row % H);
  const int64_t token = row / H;  // b * T + t
  const int64_t at = (token / T_ * H + h) * T_ + token % T_;
  const float la = lse[at], lb = block_lse[at];
  if (lb == -INFINITY) return;  // the block saw no key: nothing to add
  float wa = 0.0f, wb = 1.0f, merged = lb;
  if (la != -INFINITY) {
    const float m = fmaxf(la, lb);
    merged = m + logf(expf(la - m) + expf(lb - m));
    wa = expf(la - merged);
    wb = expf(lb - merged);
  }
  float* o = out + row * D;
  const T* ob = block_out + row * D;
  for (int i = lane; i < D; i += 32) {
    const float a = wa == 0.0f ? 0.0f : wa * o[i];  // an unseen row's out may hold anything
    o[i] = a + wb * to_f32(ob[i]);
  }
  __syncwarp();  // every lane has read la before lane 0 replaces it
  if (lane == 0) lse[at] = merged;
}

// dq_t += scale sum_s dS_ts k_s, dS_ts = P_ts (dout_t . v_s - dout_t . out_t); one warp per
// query row.
template <typename T>
__global__ void block_dq_kernel(const T* __restrict__ dout, const T* __restrict__ q, const T* __restrict__ kv,
                                const T* __restrict__ out, const float* __restrict__ lse, float* __restrict__ dq,
                                BlockDims d) {
  const int t = blockIdx.y * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= d.Tq) return;
  const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, g = h / d.group_size();
  const int64_t q_at = d.q_at(b, t, h);
  WarpRow qr, dy, acc;
  qr.load(q + q_at, d.D, lane);
  dy.load(dout + q_at, d.D, lane);
  acc.fill(0.0f);
  const float delta = dy.dot(out + q_at, d.D, lane);
  const float lse_t = lse[d.lse_at(b, h, t)];
  for (int s = 0; s < d.key_end(t); ++s) {
    const T* key = kv + d.key_at(b, s, g);
    const float p = expf(qr.dot(key, d.D, lane) * d.scale - lse_t);
    const float dp = dy.dot(kv + d.value_at(b, s, g), d.D, lane);
    acc.scale_add(1.0f, p * (dp - delta), key, d.D, lane);
  }
  acc.add_to(dq + q_at, d.scale, d.D, lane);
}

// dk_s += scale sum dS_ts q_t and dv_s += sum P_ts dout_t over the group's query heads and the
// queries that see key s; one warp per key row.
template <typename T>
__global__ void block_dkdv_kernel(const T* __restrict__ dout, const T* __restrict__ q, const T* __restrict__ kv,
                                  const T* __restrict__ out, const float* __restrict__ lse, float* __restrict__ dkv,
                                  BlockDims d) {
  const int s = blockIdx.y * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (s >= d.Tk) return;
  const int b = blockIdx.x / d.G, g = blockIdx.x % d.G;
  WarpRow key, value, dy, dk, dv;
  key.load(kv + d.key_at(b, s, g), d.D, lane);
  value.load(kv + d.value_at(b, s, g), d.D, lane);
  dk.fill(0.0f);
  dv.fill(0.0f);
  for (int h = g * d.group_size(); h < (g + 1) * d.group_size(); ++h) {
    for (int t = d.query_begin(s); t < d.Tq; ++t) {
      const int64_t q_at = d.q_at(b, t, h);
      dy.load(dout + q_at, d.D, lane);
      const float delta = dy.dot(out + q_at, d.D, lane);
      const float p = expf(key.dot(q + q_at, d.D, lane) * d.scale - lse[d.lse_at(b, h, t)]);
      const float dp = value.dot(dout + q_at, d.D, lane);
      dv.scale_add(1.0f, p, dout + q_at, d.D, lane);
      dk.scale_add(1.0f, p * (dp - delta), q + q_at, d.D, lane);
    }
  }
  dk.add_to(dkv + d.key_at(b, s, g), d.scale, d.D, lane);
  dv.add_to(dkv + d.value_at(b, s, g), 1.0f, d.D, lane);
}

// acc += x: a cuDNN block's gradients (q's dtype) into the f32 accumulators.
template <typename T>
__global__ void accumulate_kernel(float* __restrict__ acc, const T* __restrict__ x, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc[i] += to_f32(x[i]);
}

template <typename T>
void accumulate(cudaStream_t stream, const Tensor& acc, const T* x) {
  const int64_t n = acc.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(n, kThreads), 65535));
  accumulate_kernel<T><<<blocks, kThreads, 0, stream>>>(acc.data_as<float>(), x, n);
  TROUPE_CUDA_CHECK_LAUNCH();
}

bool use_cudnn(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
               std::initializer_list<const Tensor*> others, bool backward) {
  return attention_backend() != AttentionBackend::flash &&
         cudnn_attention_block_supports(ctx, q, kv, cfg, others, backward);
}

BlockDims dims_of(const Tensor& q, const Tensor& kv, const AttentionConfig& cfg, BlockMask mask, const char* op) {
  TROUPE_CHECK(cfg.head_dim <= kMaxHeadDim, op, ": CUDA block attention supports head_dim up to ", kMaxHeadDim,
               ", got ", cfg.head_dim);
  // Grids put B * H in x (31 bits) and row tiles of kWarps rows in y (16 bits).
  TROUPE_CHECK(q.dim(0) * cfg.n_heads < (int64_t(1) << 31) && q.dim(1) <= kWarps * 65535 && kv.dim(1) <= kWarps * 65535,
               op, ": CUDA block attention needs B * H < 2^31 and blocks of at most ", kWarps * 65535,
               " tokens, got q ", q.str(), " and kv ", kv.str());
  const float scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(float(cfg.head_dim));
  return {int(q.dim(0)),  int(q.dim(1)), int(kv.dim(1)), cfg.n_heads,
          cfg.n_kv_heads, cfg.head_dim,  scale,          mask == BlockMask::causal};
}

}  // namespace

void attention_block_forward(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                             BlockMask mask, const Tensor& out, const Tensor& lse) {
  constexpr const char* op = "attention_block_forward";
  const BlockDims d = dims_of(q, kv, cfg, mask, op);
  if (d.B == 0 || d.Tq == 0) return;
  NvtxRange range(op);
  if (use_cudnn(ctx, q, kv, cfg, {&out, &lse}, /*backward=*/false)) {
    cudnn_attention_block_forward(ctx, q, kv, cfg, mask, out, lse);
    return;
  }
  const cudaStream_t stream = stream_of(ctx);
  dispatch_16bit(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(unsigned(d.B * d.H), ceil_div(d.Tq, kWarps));
    block_forward_kernel<T>
        <<<grid, 32 * kWarps, 0, stream>>>(q.data_as<T>(), kv.data_as<T>(), out.data_as<T>(), lse.data_as<float>(), d);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void attention_block_merge(const Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& block_out,
                           const Tensor& block_lse) {
  constexpr const char* op = "attention_block_merge";
  TROUPE_CHECK(out.dtype() == DType::f32 && lse.dtype() == DType::f32 && block_lse.dtype() == DType::f32, op,
               ": the running out and the lses accumulate in f32, got out ", dtype_name(out.dtype()), ", lse ",
               dtype_name(lse.dtype()), ", block lse ", dtype_name(block_lse.dtype()));
  const int64_t B = out.dim(0), T = out.dim(1), H = lse.dim(1), D = out.dim(2) / H;
  const int64_t rows = B * T * H;
  if (rows == 0) return;
  NvtxRange range(op);
  dispatch_16bit(block_out.dtype(), op, [&](auto tag) {
    using Ty = typename decltype(tag)::type;
    block_merge_kernel<Ty><<<ceil_div(rows, kWarps), 32 * kWarps, 0, stream_of(ctx)>>>(
        out.data_as<float>(), lse.data_as<float>(), block_out.data_as<Ty>(), block_lse.data_as<float>(), int(B), int(T),
        int(H), int(D));
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

void attention_block_backward(const Context& ctx, const Tensor& dout, const Tensor& q, const Tensor& kv,
                              const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, BlockMask mask,
                              const Tensor& dq, const Tensor& dkv) {
  constexpr const char* op = "attention_block_backward";
  const BlockDims d = dims_of(q, kv, cfg, mask, op);
  if (d.B == 0 || d.Tq == 0 || d.Tk == 0) return;
  NvtxRange range(op);
  const cudaStream_t stream = stream_of(ctx);
  const bool cudnn = use_cudnn(ctx, q, kv, cfg, {&dout, &out, &lse}, /*backward=*/true);
  dispatch_16bit(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (cudnn) {
      // This block's dq and dkv, then added: cuDNN writes its gradients, it does not accumulate.
      const StreamBuffer<T> block_dq(stream, size_t(dq.numel())), block_dkv(stream, size_t(dkv.numel()));
      const Tensor dq_part = Tensor::wrap(block_dq.get(), q.dtype(), dq.shape(), DeviceKind::cuda, ctx.device_index());
      const Tensor dkv_part =
          Tensor::wrap(block_dkv.get(), q.dtype(), dkv.shape(), DeviceKind::cuda, ctx.device_index());
      cudnn_attention_block_backward(ctx, dout, q, kv, out, lse, cfg, mask, dq_part, dkv_part,
                                     attention_backend() == AttentionBackend::cudnn_deterministic);
      accumulate(stream, dq, block_dq.get());
      accumulate(stream, dkv, block_dkv.get());
      return;
    }
    const T *dy = dout.data_as<T>(), *xq = q.data_as<T>(), *xkv = kv.data_as<T>(), *y = out.data_as<T>();
    const float* row_lse = lse.data_as<float>();
    block_dq_kernel<T><<<dim3(unsigned(d.B * d.H), ceil_div(d.Tq, kWarps)), 32 * kWarps, 0, stream>>>(
        dy, xq, xkv, y, row_lse, dq.data_as<float>(), d);
    TROUPE_CUDA_CHECK_LAUNCH();
    block_dkdv_kernel<T><<<dim3(unsigned(d.B * d.G), ceil_div(d.Tk, kWarps)), 32 * kWarps, 0, stream>>>(
        dy, xq, xkv, y, row_lse, dkv.data_as<float>(), d);
    TROUPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace troupe::cuda
