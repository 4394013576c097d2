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

// The rows of the z-loss's mean: these rows, or a multiple (every context rank's).
void expect_total_rows(const char* op, int64_t n, int64_t total_rows) {
  TROUPE_CHECK(total_rows >= n && total_rows > 0 && (n == 0 || total_rows % n == 0), op, ": a mean over ", total_rows,
               " rows is not a whole number of the ", n, " rows here");
}

// tokens f32 [G, E] with G dividing N, and a whole group of group_size rows (a multiple of N / G).
void expect_groups(const Context& ctx, const char* op, const Tensor& tokens, int64_t n, int64_t e, int64_t group_size) {
  expect_device(op, "tokens", ctx, tokens);
  expect_dtype(op, "tokens", tokens, DType::f32);
  TROUPE_CHECK(tokens.ndim() == 2 && tokens.dim(1) == e && tokens.dim(0) > 0 && n % tokens.dim(0) == 0, op,
               ": tokens must be [G, E = ", e, "] with G dividing N = ", n, ", got ", tokens.str());
  const int64_t here = n / tokens.dim(0);
  TROUPE_CHECK(group_size >= here && (here == 0 ? group_size > 0 : group_size % here == 0), op, ": a group of ",
               group_size, " rows is not a whole number of the ", here, " rows each group has here");
}

void expect_topk(const char* op, int topk, int64_t e) {
  TROUPE_CHECK(topk >= 1 && topk <= e, op, ": top-k must be in [1, E = ", e, "], got ", topk);
}

}  // namespace

void moe_balance_counts(const Context& ctx, const Tensor& logits, MoeScoreFunction fn, int topk, int64_t group_tokens,
                        const Tensor& tokens) {
  constexpr const char* op = "moe_balance_counts";
  const auto [n, e] = expect_logits(ctx, op, logits);
  expect_topk(op, topk, e);
  TROUPE_CHECK(group_tokens > 0 && n % group_tokens == 0, op, ": ", n, " rows are not whole groups of ", group_tokens);
  expect_f32(ctx, op, "tokens", tokens, {n / group_tokens, e});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_balance_counts(ctx, logits, fn, topk, group_tokens, tokens));
  else
    cpu::moe_balance_counts(logits, fn, topk, group_tokens, tokens);
}

void moe_balance_loss_forward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                              int topk, int64_t group_size, float coeff, const Tensor& loss) {
  constexpr const char* op = "moe_balance_loss_forward";
  const auto [n, e] = expect_logits(ctx, op, logits);
  expect_topk(op, topk, e);
  expect_groups(ctx, op, tokens, n, e, group_size);
  expect_f32(ctx, op, "loss", loss, {1});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_balance_loss_forward(ctx, logits, tokens, fn, topk, group_size, coeff, loss));
  else
    cpu::moe_balance_loss_forward(logits, tokens, fn, topk, group_size, coeff, loss);
}

void moe_balance_loss_backward(const Context& ctx, const Tensor& logits, const Tensor& tokens, MoeScoreFunction fn,
                               int topk, int64_t group_size, float coeff, const Tensor& dlogits) {
  constexpr const char* op = "moe_balance_loss_backward";
  const auto [n, e] = expect_logits(ctx, op, logits);
  expect_topk(op, topk, e);
  expect_groups(ctx, op, tokens, n, e, group_size);
  expect_f32(ctx, op, "dlogits", dlogits, {n, e});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_balance_loss_backward(ctx, logits, tokens, fn, topk, group_size, coeff, dlogits));
  else
    cpu::moe_balance_loss_backward(logits, tokens, fn, topk, group_size, coeff, dlogits);
}

void moe_z_loss_forward(const Context& ctx, const Tensor& logits, float coeff, int64_t total_rows, const Tensor& loss) {
  constexpr const char* op = "moe_z_loss_forward";
  const auto [n, e] = expect_logits(ctx, op, logits);
  expect_total_rows(op, n, total_rows);
  expect_f32(ctx, op, "loss", loss, {1});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_z_loss_forward(ctx, logits, coeff, total_rows, loss));
  else
    cpu::moe_z_loss_forward(logits, coeff, total_rows, loss);
}

void moe_z_loss_backward(const Context& ctx, const Tensor& logits, float coeff, int64_t total_rows,
                         const Tensor& dlogits) {
  constexpr const char* op = "moe_z_loss_backward";
  const auto [n, e] = expect_logits(ctx, op, logits);
  expect_total_rows(op, n, total_rows);
  expect_f32(ctx, op, "dlogits", dlogits, logits.shape());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_z_loss_backward(ctx, logits, coeff, total_rows, dlogits));
  else
    cpu::moe_z_loss_backward(logits, coeff, total_rows, dlogits);
}

}  // namespace troupe
