#include "kernels/moe_permute.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// Checks the two index maps; returns {R, N, K}.
struct MapDims {
  int64_t rows, tokens, topk;
};
MapDims expect_map(const Context& ctx, const char* op, const MoeRowMap& map) {
  expect_device(op, "row_choice", ctx, map.row_choice);
  expect_dtype(op, "row_choice", map.row_choice, DType::i32);
  TROUPE_CHECK(map.row_choice.ndim() == 1, op, ": row_choice must be [R], got ", map.row_choice.str());
  expect_device(op, "choice_row", ctx, map.choice_row);
  expect_dtype(op, "choice_row", map.choice_row, DType::i32);
  TROUPE_CHECK(map.choice_row.ndim() == 2, op, ": choice_row must be [N, K], got ", map.choice_row.str());
  return {map.row_choice.dim(0), map.choice_row.dim(0), map.choice_row.dim(1)};
}

// An activation (f32 on the CPU, one 16-bit or f32 type on CUDA) of the given shape.
void expect_rows(const Context& ctx, const char* op, const char* arg, const Tensor& t, DType dtype,
                 const Shape& shape) {
  expect_device(op, arg, ctx, t);
  if (!ctx.is_cuda()) expect_dtype(op, arg, t, DType::f32);
  TROUPE_CHECK(is_float(t.dtype()), op, ": argument '", arg, "' must be floating point, got ", t.str());
  expect_dtype(op, arg, t, dtype);
  expect_shape(op, arg, t, shape);
}

void expect_probs(const Context& ctx, const char* op, const char* arg, const Tensor& t, const MapDims& d) {
  expect_device(op, arg, ctx, t);
  expect_dtype(op, arg, t, DType::f32);
  expect_shape(op, arg, t, {d.tokens, d.topk});
}

}  // namespace

void moe_permute_forward(const Context& ctx, const Tensor& x, const MoeRowMap& map, const Tensor& xp) {
  constexpr const char* op = "moe_permute_forward";
  const MapDims d = expect_map(ctx, op, map);
  TROUPE_CHECK(x.ndim() == 2 && x.dim(0) == d.tokens, op, ": x must be [N = ", d.tokens, ", C], got ", x.str());
  expect_rows(ctx, op, "x", x, x.dtype(), x.shape());
  expect_rows(ctx, op, "xp", xp, x.dtype(), {d.rows, x.dim(1)});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_permute_forward(ctx, x, map, xp));
  else
    cpu::moe_permute_forward(x, map, xp);
}

void moe_permute_backward(const Context& ctx, const Tensor& dxp, const MoeRowMap& map, const Tensor& dx) {
  constexpr const char* op = "moe_permute_backward";
  const MapDims d = expect_map(ctx, op, map);
  TROUPE_CHECK(dxp.ndim() == 2 && dxp.dim(0) == d.rows, op, ": dxp must be [R = ", d.rows, ", C], got ", dxp.str());
  expect_rows(ctx, op, "dxp", dxp, dxp.dtype(), dxp.shape());
  expect_rows(ctx, op, "dx", dx, dxp.dtype(), {d.tokens, dxp.dim(1)});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_permute_backward(ctx, dxp, map, dx));
  else
    cpu::moe_permute_backward(dxp, map, dx);
}

void moe_unpermute_forward(const Context& ctx, const Tensor& yp, const MoeRowMap& map, const Tensor& probs,
                           const Tensor& y) {
  constexpr const char* op = "moe_unpermute_forward";
  const MapDims d = expect_map(ctx, op, map);
  TROUPE_CHECK(yp.ndim() == 2 && yp.dim(0) == d.rows, op, ": yp must be [R = ", d.rows, ", C], got ", yp.str());
  expect_rows(ctx, op, "yp", yp, yp.dtype(), yp.shape());
  expect_probs(ctx, op, "probs", probs, d);
  expect_rows(ctx, op, "y", y, yp.dtype(), {d.tokens, yp.dim(1)});
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_unpermute_forward(ctx, yp, map, probs, y));
  else
    cpu::moe_unpermute_forward(yp, map, probs, y);
}

void moe_unpermute_backward(const Context& ctx, const Tensor& dy, const Tensor& yp, const MoeRowMap& map,
                            const Tensor& probs, const Tensor& dyp, const Tensor& dprobs) {
  constexpr const char* op = "moe_unpermute_backward";
  const MapDims d = expect_map(ctx, op, map);
  TROUPE_CHECK(dy.ndim() == 2 && dy.dim(0) == d.tokens, op, ": dy must be [N = ", d.tokens, ", C], got ", dy.str());
  expect_rows(ctx, op, "dy", dy, dy.dtype(), dy.shape());
  expect_rows(ctx, op, "yp", yp, dy.dtype(), {d.rows, dy.dim(1)});
  expect_probs(ctx, op, "probs", probs, d);
  expect_rows(ctx, op, "dyp", dyp, dy.dtype(), {d.rows, dy.dim(1)});
  expect_probs(ctx, op, "dprobs", dprobs, d);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_unpermute_backward(ctx, dy, yp, map, probs, dyp, dprobs));
  else
    cpu::moe_unpermute_backward(dy, yp, map, probs, dyp, dprobs);
}

}  // namespace troupe
