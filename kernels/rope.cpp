#include "kernels/rope.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

void rope_dispatch(const char* op, const Context& ctx, const Tensor& qkv, const Tensor& positions,
                   const RopeConfig& cfg, bool inverse) {
  TROUPE_CHECK(cfg.n_heads > 0 && cfg.n_kv_heads > 0 && cfg.head_dim > 0 && cfg.head_dim % 2 == 0, op,
               ": config needs positive n_heads, n_kv_heads and an even head_dim, got H=", cfg.n_heads,
               " G=", cfg.n_kv_heads, " D=", cfg.head_dim);
  TROUPE_CHECK(cfg.base > 0.0f, op, ": base must be positive, got ", cfg.base);
  TROUPE_CHECK(cfg.pos_offset >= 0, op, ": pos_offset must not be negative, got ", cfg.pos_offset);
  expect_device(op, "qkv", ctx, qkv);
  TROUPE_CHECK(qkv.ndim() == 3, op, ": qkv must be [B, T, (H + 2G) * D], got ", qkv.str());
  expect_shape(op, "qkv", qkv, {qkv.dim(0), qkv.dim(1), int64_t(cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim});
  if (ctx.is_cuda()) {
    TROUPE_CHECK(is_float(qkv.dtype()), op, ": CUDA rope needs bf16, f16 or f32 qkv, got ", dtype_name(qkv.dtype()));
    TROUPE_ON_CUDA(cuda::rope_apply(ctx, qkv, positions, cfg, inverse));
  } else {
    expect_dtype(op, "qkv", qkv, DType::f32);
    cpu::rope_apply(qkv, positions, cfg, inverse);
  }
}

}  // namespace

void rope_apply(const Context& ctx, const Tensor& qkv, const RopeConfig& cfg, bool inverse) {
  rope_dispatch("rope_apply", ctx, qkv, Tensor(), cfg, inverse);
}

void rope_apply_at(const Context& ctx, const Tensor& qkv, const Tensor& positions, const RopeConfig& cfg,
                   bool inverse) {
  constexpr const char* op = "rope_apply_at";
  expect_device(op, "positions", ctx, positions);
  expect_dtype(op, "positions", positions, DType::i32);
  TROUPE_CHECK(qkv.ndim() == 3, op, ": qkv must be [B, T, (H + 2G) * D], got ", qkv.str());
  expect_shape(op, "positions", positions, {qkv.dim(0) * qkv.dim(1)});
  rope_dispatch(op, ctx, qkv, positions, cfg, inverse);
}

}  // namespace troupe
