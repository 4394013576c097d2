#include "kernels/embedding.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

void expect_tokens(const Context& ctx, const char* op, const Tensor& tokens) {
  expect_device(op, "tokens", ctx, tokens);
  expect_dtype(op, "tokens", tokens, DType::i32);
  TROUPE_CHECK(tokens.ndim() == 2, op, ": tokens must be [B, T], got ", tokens.str());
}

// A [rows, c] table (wte, wpe or their gradients) on ctx's device.
void expect_table(const Context& ctx, const char* op, const char* arg, const Tensor& t, int64_t c) {
  expect_device(op, arg, ctx, t);
  TROUPE_CHECK(t.ndim() == 2 && t.dim(1) == c, op, ": argument '", arg, "' must be [rows, ", c, "], got ", t.str());
}

// Positions pos_offset .. pos_offset + seq_len - 1 must be rows of the position table.
void expect_positions(const char* op, const Tensor& table, int64_t seq_len, int64_t pos_offset) {
  TROUPE_CHECK(pos_offset >= 0 && pos_offset + seq_len <= table.dim(0), op, ": positions [", pos_offset, ", ",
               pos_offset + seq_len, ") do not fit a position table of ", table.dim(0), " rows");
}

void expect_shard(const char* op, const VocabShard& shard) {
  TROUPE_CHECK(!shard.sharded || shard.start >= 0, op,
               ": a vocabulary shard must start at a row >= 0, got start = ", shard.start);
}

}  // namespace

void embedding_forward(const Context& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Tensor& out, int64_t pos_offset, const VocabShard& shard) {
  constexpr const char* op = "embedding_forward";
  expect_tokens(ctx, op, tokens);
  expect_defined(op, "wte", wte);
  TROUPE_CHECK(wte.ndim() == 2, op, ": wte must be [V, C], got ", wte.str());
  const int64_t c = wte.dim(1);
  expect_table(ctx, op, "wte", wte, c);
  if (!ctx.is_cuda()) expect_dtype(op, "wte", wte, DType::f32);
  if (wpe.defined()) {
    expect_table(ctx, op, "wpe", wpe, c);
    expect_dtype(op, "wpe", wpe, wte.dtype());
    expect_positions(op, wpe, tokens.dim(1), pos_offset);
  }
  expect_device(op, "out", ctx, out);
  expect_shape(op, "out", out, {tokens.dim(0), tokens.dim(1), c});
  expect_dtype(op, "out", out, wte.dtype());
  expect_shard(op, shard);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::embedding_forward(ctx, tokens, wte, wpe, out, pos_offset, shard));
  else
    cpu::embedding_forward(tokens, wte, wpe, out, pos_offset, shard);
}

void embedding_backward(const Context& ctx, const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                        const Tensor& dwpe, int64_t pos_offset, const VocabShard& shard) {
  constexpr const char* op = "embedding_backward";
  expect_tokens(ctx, op, tokens);
  expect_device(op, "dout", ctx, dout);
  TROUPE_CHECK(dout.ndim() == 3 && dout.dim(0) == tokens.dim(0) && dout.dim(1) == tokens.dim(1), op,
               ": dout must be [B, T, C] with [B, T] = ", shape_str(tokens.shape()), ", got ", dout.str());
  if (!ctx.is_cuda()) expect_dtype(op, "dout", dout, DType::f32);
  const int64_t c = dout.dim(2);
  expect_table(ctx, op, "dwte", dwte, c);
  expect_dtype(op, "dwte", dwte, DType::f32);
  if (dwpe.defined()) {
    expect_table(ctx, op, "dwpe", dwpe, c);
    expect_dtype(op, "dwpe", dwpe, DType::f32);
    expect_positions(op, dwpe, tokens.dim(1), pos_offset);
  }
  expect_shard(op, shard);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::embedding_backward(ctx, tokens, dout, dwte, dwpe, pos_offset, shard));
  else
    cpu::embedding_backward(tokens, dout, dwte, dwpe, pos_offset, shard);
}

}  // namespace troupe
