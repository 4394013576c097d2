#include "kernels/paged_attention.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// Checks cfg, qkv [N, (H + 2G) * D] and the caches [blocks, block_size, G, D]; returns N.
int64_t expect_paged(const Context& ctx, const char* op, const Tensor& qkv, const PagedAttentionConfig& cfg,
                     const Tensor& k_cache, const Tensor& v_cache) {
  TROUPE_CHECK(cfg.n_heads > 0 && cfg.n_kv_heads > 0 && cfg.head_dim > 0 && cfg.block_size > 0, op,
               ": config needs positive n_heads, n_kv_heads, head_dim and block_size, got H=", cfg.n_heads,
               " G=", cfg.n_kv_heads, " D=", cfg.head_dim, " block_size=", cfg.block_size);
  TROUPE_CHECK(cfg.n_heads % cfg.n_kv_heads == 0, op, ": n_kv_heads (", cfg.n_kv_heads, ") must divide n_heads (",
               cfg.n_heads, ")");
  TROUPE_CHECK(cfg.scale >= 0.0f, op, ": scale must be positive (or 0 for 1/sqrt(D)), got ", cfg.scale);
  TROUPE_CHECK(cfg.window >= 0, op, ": window must be positive (or 0 for unbounded), got ", cfg.window);
  expect_device(op, "qkv", ctx, qkv);
  expect_device(op, "k_cache", ctx, k_cache);
  expect_device(op, "v_cache", ctx, v_cache);
  TROUPE_CHECK(qkv.ndim() == 2, op, ": qkv must be [N, (H + 2G) * D], got ", qkv.str());
  expect_shape(op, "qkv", qkv, {qkv.dim(0), int64_t(cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim});
  TROUPE_CHECK(k_cache.ndim() == 4, op, ": k_cache must be [blocks, block_size, G, D], got ", k_cache.str());
  expect_shape(op, "k_cache", k_cache, {k_cache.dim(0), cfg.block_size, cfg.n_kv_heads, cfg.head_dim});
  expect_shape(op, "v_cache", v_cache, k_cache.shape());
  if (ctx.is_cuda()) {
    TROUPE_CHECK(is_float(qkv.dtype()), op, ": CUDA needs bf16, f16 or f32 qkv, got ", dtype_name(qkv.dtype()));
  } else {
    expect_dtype(op, "qkv", qkv, DType::f32);
  }
  expect_dtype(op, "k_cache", k_cache, qkv.dtype());
  expect_dtype(op, "v_cache", v_cache, qkv.dtype());
  return qkv.dim(0);
}

void expect_i32(const Context& ctx, const char* op, const char* arg, const Tensor& t, const Shape& shape) {
  expect_device(op, arg, ctx, t);
  expect_dtype(op, arg, t, DType::i32);
  expect_shape(op, arg, t, shape);
}

// Checks batch and out for the N rows of qkv.
void expect_batch(const Context& ctx, const char* op, const Tensor& qkv, const PagedAttentionConfig& cfg,
                  const PagedBatch& batch, const Tensor& out) {
  const int64_t n = qkv.dim(0);
  TROUPE_CHECK(batch.seq_lens.ndim() == 1, op, ": seq_lens must be [S], got ", batch.seq_lens.str());
  const int64_t s = batch.seq_lens.dim(0);
  expect_i32(ctx, op, "seq_lens", batch.seq_lens, {s});
  expect_i32(ctx, op, "query_start", batch.query_start, {s + 1});
  TROUPE_CHECK(batch.block_tables.ndim() == 2, op, ": block_tables must be [S, max_blocks], got ",
               batch.block_tables.str());
  expect_i32(ctx, op, "block_tables", batch.block_tables, {s, batch.block_tables.dim(1)});
  expect_device(op, "out", ctx, out);
  expect_shape(op, "out", out, {n, int64_t(cfg.n_heads) * cfg.head_dim});
  expect_dtype(op, "out", out, qkv.dtype());
  TROUPE_CHECK(out.data() != qkv.data(), op, ": out must not alias qkv");
}

}  // namespace

void paged_kv_append(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots,
                     const Tensor& k_cache, const Tensor& v_cache) {
  constexpr const char* op = "paged_kv_append";
  const int64_t n = expect_paged(ctx, op, qkv, cfg, k_cache, v_cache);
  expect_i32(ctx, op, "slots", slots, {n});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::paged_kv_append(ctx, qkv, cfg, slots, k_cache, v_cache));
  else
    cpu::paged_kv_append(qkv, cfg, slots, k_cache, v_cache);
}

void paged_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const PagedBatch& batch,
                     const Tensor& k_cache, const Tensor& v_cache, const Tensor& out) {
  constexpr const char* op = "paged_attention";
  expect_paged(ctx, op, qkv, cfg, k_cache, v_cache);
  expect_batch(ctx, op, qkv, cfg, batch, out);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::paged_attention(ctx, qkv, cfg, batch, k_cache, v_cache, out));
  else
    cpu::paged_attention(qkv, cfg, batch, k_cache, v_cache, out);
}

void paged_append_attention(const Context& ctx, const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots,
                            const PagedBatch& batch, const Tensor& k_cache, const Tensor& v_cache, const Tensor& out) {
  constexpr const char* op = "paged_append_attention";
  const int64_t n = expect_paged(ctx, op, qkv, cfg, k_cache, v_cache);
  expect_i32(ctx, op, "slots", slots, {n});
  expect_batch(ctx, op, qkv, cfg, batch, out);
  if (ctx.is_cuda()) {
    TROUPE_ON_CUDA(cuda::paged_append_attention(ctx, qkv, cfg, slots, batch, k_cache, v_cache, out));
  } else {
    cpu::paged_kv_append(qkv, cfg, slots, k_cache, v_cache);
    cpu::paged_attention(qkv, cfg, batch, k_cache, v_cache, out);
  }
}

}  // namespace troupe
