#include "kernels/attention_block.hpp"

#include <utility>

#include "base/check.hpp"
#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// The dtype of a block's activations (q, kv, a block's out, dout): f32 on CPU; on CUDA `t`'s,
// bf16 or f16.
DType block_dtype(const Context& ctx, const char* op, const Tensor& t) {
  if (!ctx.is_cuda()) return DType::f32;
  TROUPE_CHECK(t.dtype() == DType::bf16 || t.dtype() == DType::f16, op,
               ": CUDA block attention needs bf16 or f16 activations, got ", t.str());
  return t.dtype();
}

// Checks the block's tensors against cfg; returns nothing, throws naming the argument.
void expect_block(const Context& ctx, const char* op, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                  BlockMask mask) {
  TROUPE_CHECK(cfg.n_heads > 0 && cfg.n_kv_heads > 0 && cfg.head_dim > 0 && cfg.n_heads % cfg.n_kv_heads == 0, op,
               ": config needs positive heads with n_kv_heads dividing n_heads, got H=", cfg.n_heads,
               " G=", cfg.n_kv_heads, " D=", cfg.head_dim);
  TROUPE_CHECK(cfg.window == 0, op, ": a sliding window (", cfg.window,
               ") is not supported by block attention; drop --window-size or use --context-parallel-size 1");
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"kv", &kv}}) {
    expect_device(op, name, ctx, *t);
    expect_dtype(op, name, *t, block_dtype(ctx, op, q));
    TROUPE_CHECK(t->ndim() == 3, op, ": ", name, " must be [B, T, width], got ", t->str());
  }
  const int64_t B = q.dim(0), Tq = q.dim(1), Tk = kv.dim(1);
  expect_shape(op, "q", q, {B, Tq, int64_t(cfg.n_heads) * cfg.head_dim});
  expect_shape(op, "kv", kv, {B, Tk, 2 * int64_t(cfg.n_kv_heads) * cfg.head_dim});
  TROUPE_CHECK(mask == BlockMask::full || Tq == Tk, op, ": a causal (diagonal) block needs Tq == Tk, got ", Tq, " and ",
               Tk);
}

void expect_out(const Context& ctx, const char* op, const Tensor& q, const AttentionConfig& cfg, const char* out_name,
                const Tensor& out, const char* lse_name, const Tensor& lse) {
  expect_device(op, out_name, ctx, out);
  expect_shape(op, out_name, out, q.shape());
  expect_dtype(op, out_name, out, block_dtype(ctx, op, q));
  expect_device(op, lse_name, ctx, lse);
  expect_shape(op, lse_name, lse, {q.dim(0), cfg.n_heads, q.dim(1)});
  expect_dtype(op, lse_name, lse, DType::f32);
}

}  // namespace

void attention_block_forward(const Context& ctx, const Tensor& q, const Tensor& kv, const AttentionConfig& cfg,
                             BlockMask mask, const Tensor& out, const Tensor& lse) {
  constexpr const char* op = "attention_block_forward";
  expect_block(ctx, op, q, kv, cfg, mask);
  expect_out(ctx, op, q, cfg, "out", out, "lse", lse);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::attention_block_forward(ctx, q, kv, cfg, mask, out, lse));
  else
    cpu::attention_block_forward(q, kv, cfg, mask, out, lse);
}

void attention_block_merge(const Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& block_out,
                           const Tensor& block_lse) {
  constexpr const char* op = "attention_block_merge";
  TROUPE_CHECK(out.ndim() == 3 && lse.ndim() == 3, op, ": out must be [B, T, H*D] and lse [B, H, T], got ", out.str(),
               " and ", lse.str());
  // The running out accumulates in f32; the block's out is the forward's (q's dtype).
  for (auto [name, t] : {std::pair{"out", &out}, std::pair{"lse", &lse}, std::pair{"block_out", &block_out},
                         std::pair{"block_lse", &block_lse}}) {
    expect_device(op, name, ctx, *t);
    expect_dtype(op, name, *t, t == &block_out ? block_dtype(ctx, op, block_out) : DType::f32);
  }
  expect_shape(op, "block_out", block_out, out.shape());
  expect_shape(op, "block_lse", block_lse, lse.shape());
  TROUPE_CHECK(lse.dim(0) == out.dim(0) && lse.dim(2) == out.dim(1) && out.dim(2) % lse.dim(1) == 0, op, ": lse ",
               lse.str(), " does not match out ", out.str());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::attention_block_merge(ctx, out, lse, block_out, block_lse));
  else
    cpu::attention_block_merge(out, lse, block_out, block_lse);
}

void attention_block_backward(const Context& ctx, const Tensor& dout, const Tensor& q, const Tensor& kv,
                              const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, BlockMask mask,
                              const Tensor& dq, const Tensor& dkv) {
  constexpr const char* op = "attention_block_backward";
  expect_block(ctx, op, q, kv, cfg, mask);
  expect_out(ctx, op, q, cfg, "out", out, "lse", lse);
  expect_out(ctx, op, q, cfg, "dout", dout, "lse", lse);
  // The accumulators are f32 on every device.
  expect_device(op, "dq", ctx, dq);
  expect_shape(op, "dq", dq, q.shape());
  expect_dtype(op, "dq", dq, DType::f32);
  expect_device(op, "dkv", ctx, dkv);
  expect_shape(op, "dkv", dkv, kv.shape());
  expect_dtype(op, "dkv", dkv, DType::f32);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::attention_block_backward(ctx, dout, q, kv, out, lse, cfg, mask, dq, dkv));
  else
    cpu::attention_block_backward(dout, q, kv, out, lse, cfg, mask, dq, dkv);
}

}  // namespace troupe
