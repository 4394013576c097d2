#include "kernels/moe_routing.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// Checks logits [N, E] f32 and the k of t; returns {N, E}.
std::pair<int64_t, int64_t> expect_logits(const Context& ctx, const char* op, const Tensor& logits, const MoeTopk& t) {
  expect_device(op, "logits", ctx, logits);
  expect_dtype(op, "logits", logits, DType::f32);
  TROUPE_CHECK(logits.ndim() == 2, op, ": logits must be [N, E], got ", logits.str());
  TROUPE_CHECK(t.topk >= 1 && t.topk <= logits.dim(1), op, ": top-k must be in [1, E = ", logits.dim(1), "], got ",
               t.topk);
  return {logits.dim(0), logits.dim(1)};
}

void expect_picks(const Context& ctx, const char* op, const char* arg, const Tensor& x, DType dtype, int64_t n, int k) {
  expect_device(op, arg, ctx, x);
  expect_dtype(op, arg, x, dtype);
  expect_shape(op, arg, x, {n, k});
}

}  // namespace

void moe_topk_forward(const Context& ctx, const Tensor& logits, const Tensor& expert_bias, const MoeTopk& t,
                      const Tensor& probs, const Tensor& experts) {
  constexpr const char* op = "moe_topk_forward";
  const auto [n, e] = expect_logits(ctx, op, logits, t);
  if (expert_bias.defined()) {
    TROUPE_CHECK(t.score_function == MoeScoreFunction::sigmoid, op,
                 ": an expert bias works with the sigmoid score function only (as in Megatron-Core)");
    expect_device(op, "expert_bias", ctx, expert_bias);
    expect_dtype(op, "expert_bias", expert_bias, DType::f32);
    expect_shape(op, "expert_bias", expert_bias, {e});
  }
  expect_picks(ctx, op, "probs", probs, DType::f32, n, t.topk);
  expect_picks(ctx, op, "experts", experts, DType::i32, n, t.topk);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_topk_forward(ctx, logits, expert_bias, t, probs, experts));
  else
    cpu::moe_topk_forward(logits, expert_bias, t, probs, experts);
}

void moe_topk_backward(const Context& ctx, const Tensor& logits, const Tensor& experts, const Tensor& dprobs,
                       const MoeTopk& t, const Tensor& dlogits) {
  constexpr const char* op = "moe_topk_backward";
  const auto [n, e] = expect_logits(ctx, op, logits, t);
  expect_picks(ctx, op, "experts", experts, DType::i32, n, t.topk);
  expect_picks(ctx, op, "dprobs", dprobs, DType::f32, n, t.topk);
  expect_device(op, "dlogits", ctx, dlogits);
  expect_dtype(op, "dlogits", dlogits, DType::f32);
  expect_shape(op, "dlogits", dlogits, {n, e});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_topk_backward(ctx, logits, experts, dprobs, t, dlogits));
  else
    cpu::moe_topk_backward(logits, experts, dprobs, t, dlogits);
}

}  // namespace troupe
