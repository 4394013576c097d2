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
  auto expect_per_row = [&](const char* arg, const Tensor& t, DType dtype) {  // [S] on ctx's device
    expect_device(op, arg, ctx, t);
    expect_dtype(op, arg, t, dtype);
    expect_shape(op, arg, t, {s});
  };
  expect_per_row("tokens", tokens, DType::i32);
  expect_per_row("logprobs", logprobs, DType::f32);
  if (maxes.defined()) expect_per_row("maxes", maxes, DType::f32);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::argmax_logprob(ctx, logits, vocab, tokens, logprobs, maxes));
  else
    cpu::argmax_logprob(logits, vocab, tokens, logprobs, maxes);
}

}  // namespace troupe
