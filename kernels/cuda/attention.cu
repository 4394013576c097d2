// CUDA attention entry points: cuDNN's fused attention when TROUPE_ATTENTION_BACKEND selects it
// and covers the shape (kernels/cuda/attention_cudnn.hpp); else the flash (tensor-core) kernels
// for head dims 64 and 128 with 16-byte aligned tensors, the simple kernels for everything else.
// All take the sliding window (AttentionDims::window) and skip the keys outside it.
#include <cmath>
#include <cstdint>

#include "kernels/attention.hpp"
#include "kernels/cuda/attention_cudnn.hpp"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/common.cuh"

namespace troupe::cuda {

namespace {

AttentionDims dims_of(const Tensor& qkv, const AttentionConfig& cfg) {
  const float scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(float(cfg.head_dim));
  // Grids put B * H in x (31 bits) and row tiles of at least 4 rows in y (16 bits).
  TROUPE_CHECK(qkv.dim(0) * cfg.n_heads < (int64_t(1) << 31) && qkv.dim(1) <= 4 * 65535,
               "attention: CUDA kernels need B * H < 2^31 and T <= 262140, got ", qkv.str());
  const int T = int(qkv.dim(1));
  const int window = cfg.window > 0 && cfg.window < T ? cfg.window : kUnboundedWindow;  // W >= T: unbounded
  return {int(qkv.dim(0)), T, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, scale, window};
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

}  // namespace

bool attention_forward_fast(DType dtype, int head_dim) {
  // flash_attention_supports reads the head dim only; cuDNN covers a subset of its shapes.
  AttentionDims d{};
  d.D = head_dim;
  return (dtype == DType::bf16 || dtype == DType::f16) && flash_attention_supports(d);
}

void attention_forward(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                       const Tensor& lse, bool allow_cudnn) {
  const AttentionDims d = dims_of(qkv, cfg);
  if (d.B == 0 || d.T == 0) return;
  // An unsupported shape runs ours silently; a cuDNN failure on a supported one throws.
  if (allow_cudnn && attention_backend() != AttentionBackend::flash &&
      cudnn_attention_supports(ctx, qkv, cfg, {&out, &lse}, /*backward=*/false)) {
    cudnn_attention_forward(ctx, qkv, cfg, out, lse);
    return;
  }
  const CudaState& st = ctx.cuda_state();
  const bool flash = flash_attention_supports(d) && aligned16(qkv) && aligned16(out);
  dispatch_16bit(qkv.dtype(), "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (flash)
      flash_attention_forward<T>(st, d, qkv.data_as<T>(), out.data_as<T>(), lse.data_as<float>());
    else
      simple_attention_forward<T>(st, d, qkv.data_as<T>(), out.data_as<T>(), lse.data_as<float>());
  });
}

void attention_backward(const Context& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionConfig& cfg, const Tensor& dqkv) {
  const AttentionDims d = dims_of(qkv, cfg);
  TROUPE_CHECK(d.D >= 2, "attention_backward: CUDA needs head_dim >= 2 (delta lives in the query slot of dqkv)");
  if (d.B == 0 || d.T == 0) return;
  const AttentionBackend backend = attention_backend();
  if (backend != AttentionBackend::flash &&
      cudnn_attention_supports(ctx, qkv, cfg, {&out, &lse, &dout, &dqkv}, /*backward=*/true)) {
    cudnn_attention_backward(ctx, dout, qkv, out, lse, cfg, dqkv, backend == AttentionBackend::cudnn_deterministic);
    return;
  }
  const CudaState& st = ctx.cuda_state();
  const bool flash =
      flash_attention_supports(d) && aligned16(qkv) && aligned16(out) && aligned16(dout) && aligned16(dqkv);
  dispatch_16bit(qkv.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *dy = dout.data_as<T>(), *x = qkv.data_as<T>(), *y = out.data_as<T>();
    const float* row_lse = lse.data_as<float>();
    T* dx = dqkv.data_as<T>();
    // Order matters: delta goes into dqkv's query slots, dk/dv reads it, dq overwrites it.
    attention_delta<T>(st, d, dy, y, dx);
    if (flash) {
      flash_attention_backward_dkdv<T>(st, d, dy, x, row_lse, dx);
      flash_attention_backward_dq<T>(st, d, dy, x, y, row_lse, dx);
    } else {
      simple_attention_backward_dkdv<T>(st, d, dy, x, row_lse, dx);
      simple_attention_backward_dq<T>(st, d, dy, x, y, row_lse, dx);
    }
  });
}

}  // namespace troupe::cuda
