#include "kernels/cross_entropy.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

// logits [N, Vp] (f32 on the CPU), targets i32 [N], losses f32 [N], 1 <= vocab_size <= Vp.
static void check_cross_entropy_args(const Context& ctx, const char* op, const Tensor& logits, const Tensor& targets,
                                     int64_t vocab_size, const Tensor& losses) {
  expect_device(op, "logits", ctx, logits);
  if (!ctx.is_cuda()) expect_dtype(op, "logits", logits, DType::f32);
  TROUPE_CHECK(logits.ndim() == 2, op, ": logits must be [N, Vp], got ", logits.str());
  const int64_t n = logits.dim(0), padded_vocab = logits.dim(1);
  TROUPE_CHECK(vocab_size >= 1 && vocab_size <= padded_vocab, op, ": vocab_size must be in [1, Vp = ", padded_vocab,
               "], got ", vocab_size);
  expect_device(op, "targets", ctx, targets);
  expect_dtype(op, "targets", targets, DType::i32);
  expect_shape(op, "targets", targets, {n});
  expect_device(op, "losses", ctx, losses);
  expect_dtype(op, "losses", losses, DType::f32);
  expect_shape(op, "losses", losses, {n});
}

void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                           const Tensor& losses) {
  check_cross_entropy_args(ctx, "cross_entropy_forward", logits, targets, vocab_size, losses);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::cross_entropy_forward(ctx, logits, targets, vocab_size, losses));
  else
    cpu::cross_entropy_forward(logits, targets, vocab_size, losses);
}

void cross_entropy_forward_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, int64_t vocab_size,
                                    float grad_scale, const Tensor& losses) {
  check_cross_entropy_args(ctx, "cross_entropy_forward_backward", logits, targets, vocab_size, losses);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::cross_entropy_forward_backward(ctx, logits, targets, vocab_size, grad_scale, losses));
  else
    cpu::cross_entropy_forward_backward(logits, targets, vocab_size, grad_scale, losses);
}

}  // namespace troupe
