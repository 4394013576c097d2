#include "kernels/moe_router_losses.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// logits f32 [N, E] on ctx's device; returns {N, E}.
std::pair<int64_t, int64_t> expect_logits(const Context& ctx, const char* op, const Tensor& logits) {
  expect_device(op, "logits", ctx, logits);
  expect_dtype(op, "logits", logits, DType::f32);
  TROUPE_CHECK(logits.ndim() == 2 && logits.dim(1) > 0, op, ": logits must be [N, E], got ", logits.str());
  return {logits.dim(0), logits.dim(1)};
}

void expect_f32(const Context& ctx, const char* op, const char* arg, const Tensor& t, const Shape& shape) {
  expect_device(op, arg, ctx, t);
  expect_dtype(op, arg, t, DType::f32);
  expect_shape(op, arg, t, shape);
}

}  // namespace

void moe_balance_loss_forward(const Context& ctx, const Tensor& logits, MoeScoreFunction fn, int topk,
                              int64_t group_tokens, float coeff, const Tensor& tokens, const Tensor& loss) {
  constexpr const char* op = "moe_balance_loss_forward";
  const auto [n, e] = expect_logits(ctx, op, logits);
  TROUPE_CHECK(topk >= 1 && topk <= e, op, ": top-k must be in [1, E = ", e, "], got ", topk);
  TROUPE_CHECK(group_tokens > 0 && n % group_tokens == 0, op, ": ", n, " rows are not whole groups of ", group_tokens);
  expect_f32(ctx, op, "tokens", tokens, {n / group_tokens, e});
  expect_f32(ctx, op, "loss", loss, {1});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_balance_loss_forward(ctx, logits, fn, topk, group_tokens, coeff, tokens, loss));
  else
    cpu::moe_balance_loss_forward(logits, fn, topk, group_tokens, coeff, tokens, loss);
}

void moe_balance_loss_backward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                               int topk, float coeff, const Tensor& dlogits) {
  constexpr const char* op = "moe_balance_loss_backward";
  const auto [n, e] = expect_logits(ctx, op, logits);
  TROUPE_CHECK(topk >= 1 && topk <= e, op, ": top-k must be in [1, E = ", e, "], got ", topk);
  expect_device(op, "tokens", ctx, tokens);
  expect_dtype(op, "tokens", tokens, DType::f32);
  TROUPE_CHECK(tokens.ndim() == 2 && tokens.dim(1) == e && tokens.dim(0) > 0 && n % tokens.dim(0) == 0, op,
               ": tokens must be [G, E = ", e, "] with G dividing N = ", n, ", got ", tokens.str());
  expect_f32(ctx, op, "dlogits", dlogits, {n, e});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_balance_loss_backward(ctx, logits, tokens, fn, topk, coeff, dlogits));
  else
    cpu::moe_balance_loss_backward(logits, tokens, fn, topk, coeff, dlogits);
}

void moe_z_loss_forward(const Context& ctx, const Tensor& logits, float coeff, const Tensor& loss) {
  constexpr const char* op = "moe_z_loss_forward";
  expect_logits(ctx, op, logits);
  expect_f32(ctx, op, "loss", loss, {1});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_z_loss_forward(ctx, logits, coeff, loss));
  else
    cpu::moe_z_loss_forward(logits, coeff, loss);
}

void moe_z_loss_backward(const Context& ctx, const Tensor& logits, float coeff, const Tensor& dlogits) {
  constexpr const char* op = "moe_z_loss_backward";
  expect_logits(ctx, op, logits);
  expect_f32(ctx, op, "dlogits", dlogits, logits.shape());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_z_loss_backward(ctx, logits, coeff, dlogits));
  else
    cpu::moe_z_loss_backward(logits, coeff, dlogits);
}

}  // namespace troupe
