#include "kernels/attention.hpp"

#include <utility>

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// Checks cfg against qkv [B, T, (H + 2G) * D] and the backend's dtype rules; returns {B, T}.
std::pair<int64_t, int64_t> expect_qkv(const Context& ctx, const char* op, const Tensor& qkv,
                                       const AttentionConfig& cfg) {
  TROUPE_CHECK(cfg.n_heads > 0 && cfg.n_kv_heads > 0 && cfg.head_dim > 0, op,
               ": config needs positive n_heads, n_kv_heads and head_dim, got H=", cfg.n_heads, " G=", cfg.n_kv_heads,
               " D=", cfg.head_dim);
  TROUPE_CHECK(cfg.n_heads % cfg.n_kv_heads == 0, op, ": n_kv_heads (", cfg.n_kv_heads, ") must divide n_heads (",
               cfg.n_heads, ")");
  TROUPE_CHECK(cfg.scale >= 0.0f, op, ": scale must be positive (or 0 for 1/sqrt(D)), got ", cfg.scale);
  TROUPE_CHECK(cfg.window >= 0, op, ": window must be positive (or 0 for unbounded), got ", cfg.window);
  expect_device(op, "qkv", ctx, qkv);
  TROUPE_CHECK(qkv.ndim() == 3, op, ": qkv must be [B, T, (H + 2G) * D], got ", qkv.str());
  const int64_t width = int64_t(cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim;
  expect_shape(op, "qkv", qkv, {qkv.dim(0), qkv.dim(1), width});
  if (ctx.is_cuda()) {
    TROUPE_CHECK(qkv.dtype() == DType::bf16 || qkv.dtype() == DType::f16, op,
                 ": CUDA attention needs bf16 or f16 qkv, got ", dtype_name(qkv.dtype()));
  } else {
    expect_dtype(op, "qkv", qkv, DType::f32);
  }
  return {qkv.dim(0), qkv.dim(1)};
}

void expect_like(const Context& ctx, const char* op, const char* arg, const Tensor& t, const Shape& shape,
                 DType dtype) {
  expect_device(op, arg, ctx, t);
  expect_shape(op, arg, t, shape);
  expect_dtype(op, arg, t, dtype);
}

}  // namespace

namespace {
void forward(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out, const Tensor& lse,
             [[maybe_unused]] bool allow_cudnn) {
  constexpr const char* op = "attention_forward";
  const auto [B, T] = expect_qkv(ctx, op, qkv, cfg);
  expect_like(ctx, op, "out", out, {B, T, int64_t(cfg.n_heads) * cfg.head_dim}, qkv.dtype());
  expect_like(ctx, op, "lse", lse, {B, cfg.n_heads, T}, DType::f32);
  TROUPE_CHECK(out.data() != qkv.data(), op, ": out must not alias qkv");
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::attention_forward(ctx, qkv, cfg, out, lse, allow_cudnn));
  else
    cpu::attention_forward(qkv, cfg, out, lse);
}
}  // namespace

void attention_forward(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                       const Tensor& lse) {
  forward(ctx, qkv, cfg, out, lse, /*allow_cudnn=*/true);
}

void attention_forward_any_length(const Context& ctx, const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out,
                                  const Tensor& lse) {
  forward(ctx, qkv, cfg, out, lse, /*allow_cudnn=*/false);
}

bool attention_forward_fast(const Context& ctx, DType dtype, int head_dim) {
  if (!ctx.is_cuda()) return dtype == DType::f32;
#if TROUPE_HAVE_CUDA
  return cuda::attention_forward_fast(dtype, head_dim);
#else
  return false;
#endif
}

void attention_backward(const Context& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionConfig& cfg, const Tensor& dqkv) {
  constexpr const char* op = "attention_backward";
  const auto [B, T] = expect_qkv(ctx, op, qkv, cfg);
  const Shape out_shape{B, T, int64_t(cfg.n_heads) * cfg.head_dim};
  expect_like(ctx, op, "dout", dout, out_shape, qkv.dtype());
  expect_like(ctx, op, "out", out, out_shape, qkv.dtype());
  expect_like(ctx, op, "lse", lse, {B, cfg.n_heads, T}, DType::f32);
  expect_like(ctx, op, "dqkv", dqkv, qkv.shape(), qkv.dtype());
  // dqkv is written while the inputs are still read (and the CUDA path keeps scratch in it).
  for (auto [name, t] : {std::pair{"qkv", &qkv}, std::pair{"out", &out}, std::pair{"dout", &dout}})
    TROUPE_CHECK(dqkv.data() != t->data(), op, ": dqkv must not alias ", name);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::attention_backward(ctx, dout, qkv, out, lse, cfg, dqkv));
  else
    cpu::attention_backward(dout, qkv, out, lse, cfg, dqkv);
}

}  // namespace troupe
