#include "kernels/argmax.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

void argmax_logprob(const Context& ctx, const Tensor& logits, int64_t vocab, const Tensor& tokens,
                    const Tensor& logprobs, const Tensor& maxes) {
  constexpr const char* op = "argmax_logprob";
  expect_device(op, "logits", ctx, logits);
  TROUPE_CHECK(logits.ndim() == 2, op, ": logits must be [S, Vp], got ", logits.str());
  TROUPE_CHECK(vocab > 0 && vocab <= logits.dim(1), op, ": vocab must be in [1, ", logits.dim(1), "], got ", vocab);
  if (ctx.is_cuda())
    TROUPE_CHECK(is_float(logits.dtype()), op, ": logits must be bf16, f16 or f32, got ", logits.str());
  else
    expect_dtype(op, "logits", logits, DType::f32);
  const int64_t s = logits.dim(0);
  expect_device(op, "tokens", ctx, tokens);
  expect_dtype(op, "tokens", tokens, DType::i32);
  expect_shape(op, "tokens", tokens, {s});
  expect_device(op, "logprobs", ctx, logprobs);
  expect_dtype(op, "logprobs", logprobs, DType::f32);
  expect_shape(op, "logprobs", logprobs, {s});
  if (maxes.defined()) {
    expect_device(op, "maxes", ctx, maxes);
    expect_dtype(op, "maxes", maxes, DType::f32);
    expect_shape(op, "maxes", maxes, {s});
  }
  if (ctx.is_cuda()) TROUPE_ON_CUDA(cuda::argmax_logprob(ctx, logits, vocab, tokens, logprobs, maxes));
  else cpu::argmax_logprob(logits, vocab, tokens, logprobs, maxes);
}

}  // namespace troupe
