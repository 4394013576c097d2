#include "model/fp8/fp8_linears.hpp"

#include <utility>

#include "base/check.hpp"
#include "kernels/linear.hpp"

namespace troupe {

namespace {

Fp8Linears::Meta make_meta(const Context& ctx, int64_t len, int64_t count) {
  Fp8Linears::Meta m;
  m.history = Tensor::zeros(ctx, DType::f32, {len, count});
  const Tensor ones = Tensor::host_f32({count}, std::vector<float>(size_t(count), 1.0f));
  m.scale = Tensor::empty(ctx, DType::f32, {count});
  m.scale_inv = Tensor::zeros(ctx, DType::f32, {count, kFp8ScaleRow});
  copy(ctx, ones, m.scale);
  copy_columns(ctx, ones.view({count, 1}), 0, m.scale_inv, 0, 1);
  ctx.synchronize();
  return m;
}

}  // namespace

Fp8Linears::Fp8Linears(const Context& ctx, const Fp8Recipe& recipe, int count, std::vector<Collectives*> cast_groups)
    : ctx_(ctx), recipe_(recipe), count_(count) {
  for (Collectives* g : cast_groups)
    if (g && g->size() > 1) cast_groups_.push_back(g);
  TROUPE_CHECK(recipe.enabled, "Fp8Linears: the recipe is off (no --fp8-format)");
  TROUPE_CHECK(count >= 0, "Fp8Linears: ", count, " linear layers");
  // Tensorwise scaling keeps only the amax of the cast at hand.
  const int64_t len = recipe.scaling == Fp8ScalingKind::delayed ? recipe.amax_history_len : 1;
  fwd_ = make_meta(ctx, len, 2 * int64_t(count));
  bwd_ = make_meta(ctx, len, count);
}

Tensor Fp8Linears::bytes(Tensor& buf, const Shape& shape) {
  const int64_t n = shape_numel(shape);
  if (!buf.defined() || buf.numel() < n) buf = Tensor::empty(ctx_, DType::u8, {n});
  return buf.slice(0, shape);
}

Fp8Linears::Scales Fp8Linears::current_scales(Meta& meta, int t, Fp8Format f) {
  const Tensor amax = meta.history.slice(t, {1});  // row 0, column t
  Scales s{meta.scale.slice(t, {1}), meta.scale_inv.slice(t * kFp8ScaleRow, {1}), Tensor()};
  for (Collectives* g : cast_groups_) g->all_reduce(ctx_, amax, ReduceOp::max);
  fp8_scales_update(ctx_, amax.view({1, 1}), s.scale, s.scale_inv, {fp8_max(f), 0, false, false});
  return s;
}

Fp8Linears::Scales Fp8Linears::scales_for(Meta& meta, int t, Fp8Format f, const Tensor& x, bool record) {
  const Tensor amax = meta.history.slice(t, {1});  // row 0, column t
  if (recipe_.scaling == Fp8ScalingKind::tensorwise) {
    fill_zero(ctx_, amax);
    fp8_amax(ctx_, x, amax);
    return current_scales(meta, t, f);
  }
  Scales s{meta.scale.slice(t, {1}), meta.scale_inv.slice(t * kFp8ScaleRow, {1}), Tensor()};
  if (record && recipe_.fuse_casts)
    s.amax = amax;
  else if (record)
    fp8_amax(ctx_, x, amax);
  return s;
}

Fp8Operand Fp8Linears::quantize(Meta& meta, int t, Fp8Format f, const Tensor& x, Tensor& q, bool record) {
  const Scales s = scales_for(meta, t, f, x, record);
  const Tensor bytes_of_x = bytes(q, x.shape());
  fp8_cast(ctx_, x, s.scale, f, bytes_of_x, s.amax);
  return {bytes_of_x, f, s.scale_inv};
}

Fp8Operand Fp8Linears::quantize_transposed(Meta& meta, int t, Fp8Format f, const Tensor& x, const Tensor& q, Tensor& qt,
                                           bool record) {
  const Scales s = scales_for(meta, t, f, x, record);
  const Tensor transposed = bytes(qt, {x.dim(1), x.dim(0)});
  fp8_cast_transpose(ctx_, x, s.scale, f, q, transposed, s.amax);
  return {transposed, f, s.scale_inv};
}

Fp8SideOutput Fp8Linears::input_cast(int linear, const Shape& x_shape, bool record) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  TROUPE_CHECK(recipe_.forward == Fp8Format::e4m3, "Fp8Linears::input_cast: the forward format must be e4m3");
  if (!recipe_.fuse_casts) return {};
  const int t = 2 * linear;
  const Tensor amax = fwd_.history.slice(t, {1});
  if (recipe_.scaling == Fp8ScalingKind::tensorwise) {
    fill_zero(ctx_, amax);
    return {Tensor(), Tensor(), amax};
  }
  return {bytes(qx_, x_shape), fwd_.scale.slice(t, {1}), record ? amax : Tensor()};
}

void Fp8Linears::forward(int linear, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool record,
                         const Fp8SideOutput& x_cast) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  const int t = 2 * linear;
  Fp8Operand qx;
  if (!x_cast.any()) {
    qx = quantize(fwd_, t, recipe_.forward, x, qx_, record);
  } else if (x_cast.q.defined()) {  // delayed: x's producer wrote the bytes
    TROUPE_CHECK(recipe_.scaling == Fp8ScalingKind::delayed && x_cast.q.shape() == x.shape(),
                 "Fp8Linears::forward: x_cast is not input_cast's for this x");
    qx = {x_cast.q, recipe_.forward, fwd_.scale_inv.slice(t * kFp8ScaleRow, {1})};
  } else {  // tensorwise: x's amax is in its slot; reduce it, scale, cast
    TROUPE_CHECK(recipe_.scaling == Fp8ScalingKind::tensorwise, "Fp8Linears::forward: x_cast is not input_cast's");
    const Scales s = current_scales(fwd_, t, recipe_.forward);
    qx = {bytes(qx_, x.shape()), recipe_.forward, s.scale_inv};
    fp8_cast(ctx_, x, s.scale, recipe_.forward, qx.data);
  }
  const Fp8Operand qw = quantize(fwd_, t + 1, recipe_.forward, w, qw_, record);
  fp8_gemm(ctx_, qx, qw, y, 0.0f, b);
}

void Fp8Linears::backward(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                          const Tensor& dw, const Tensor& db) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  const bool fp8_wgrad = dw.defined() && recipe_.wgrad;
  // Delayed scaling: x's and w's amaxes were recorded by the forward; the casts reuse its scales.
  if (fp8_wgrad) {  // dw[N, K] += dy^T [N, M] x^T [K, M]^T; dy's cast kept for dx
    const Tensor qdy = dx.defined() ? bytes(qdy_, dy.shape()) : Tensor();
    const Fp8Operand dyt = quantize_transposed(bwd_, linear, recipe_.backward, dy, qdy, qt_a_, true);
    const Fp8Operand xt = quantize_transposed(fwd_, 2 * linear, recipe_.forward, x, Tensor(), qt_b_, false);
    fp8_gemm(ctx_, dyt, xt, dw, 1.0f);  // dw += q(dy)^T q(x)
    if (dx.defined()) input_gradient(linear, {qdy, dyt.format, dyt.scale_inv}, w, dx);
  } else if (dx.defined()) {
    input_gradient(linear, quantize(bwd_, linear, recipe_.backward, dy, qdy_), w, dx);
  }
  high_precision_gradients(dy, x, w, dw, db);
}

void Fp8Linears::backward_input(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                                const Tensor& wgrad_scales) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  TROUPE_CHECK(wgrad_scales.dtype() == DType::f32 && wgrad_scales.numel() == kWgradScales * kFp8ScaleRow,
               "Fp8Linears::backward_input: wgrad_scales must be f32 [", kWgradScales, ", ", kFp8ScaleRow, "]");
  const Fp8Operand qdy = quantize(bwd_, linear, recipe_.backward, dy, qdy_);
  if (dx.defined()) input_gradient(linear, qdy, w, dx);
  if (!recipe_.wgrad) return;  // W's GEMM takes dy and x unquantized
  // x's scale as backward's cast of x takes it (delayed: the forward's, unchanged until
  // update_scales; tensorwise: from x's amax).
  const Scales sx = scales_for(fwd_, 2 * linear, recipe_.forward, x, false);
  const Tensor sources[kWgradScales] = {sx.scale, sx.scale_inv, bwd_.scale.slice(linear, {1}), qdy.scale_inv};
  for (int64_t r = 0; r < kWgradScales; ++r) copy(ctx_, sources[r], wgrad_scales.slice(r * kFp8ScaleRow, {1}));
}

void Fp8Linears::backward_weight(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                                 const Tensor& db, const Tensor& wgrad_scales) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  if (dw.defined() && recipe_.wgrad) {
    const auto row = [&](int64_t r) { return wgrad_scales.slice(r * kFp8ScaleRow, {1}); };
    const Fp8Operand dyt = cast_transposed(recipe_.backward, dy, row(2), row(3), qt_a_);
    const Fp8Operand xt = cast_transposed(recipe_.forward, x, row(0), row(1), qt_b_);
    fp8_gemm(ctx_, dyt, xt, dw, 1.0f);  // dw += q(dy)^T q(x)
  }
  high_precision_gradients(dy, x, w, dw, db);
}

Fp8Operand Fp8Linears::cast_transposed(Fp8Format f, const Tensor& x, const Tensor& scale, const Tensor& scale_inv,
                                       Tensor& qt) {
  const Tensor transposed = bytes(qt, {x.dim(1), x.dim(0)});
  fp8_cast_transpose(ctx_, x, scale, f, Tensor(), transposed);
  return {transposed, f, scale_inv};
}

void Fp8Linears::high_precision_gradients(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                                          const Tensor& db) {
  const Tensor dw_high = recipe_.wgrad ? Tensor() : dw;
  if (db.defined() || dw_high.defined()) linear_backward(ctx_, dy, x, w, Tensor(), dw_high, db);
}

void Fp8Linears::input_gradient(int linear, const Fp8Operand& qdy, const Tensor& w, const Tensor& dx) {
  // dx[M, K] = dy[M, N] w[N, K]: w^T [K, N] K-major for the TN GEMM. qt_b_ is free again: the
  // weight-gradient GEMM that read it is ahead in stream order.
  const Fp8Operand wt = quantize_transposed(fwd_, 2 * linear + 1, recipe_.forward, w, Tensor(), qt_b_, false);
  fp8_gemm(ctx_, qdy, wt, dx);
}

void Fp8Linears::load_meta(const Meta& forward, const Meta& backward) {
  for (const auto& [dst, src] : {std::pair{&fwd_, &forward}, std::pair{&bwd_, &backward}}) {
    const int64_t count = dst->scale.numel();
    TROUPE_CHECK(src->history.shape() == dst->history.shape() && src->scale.shape() == dst->scale.shape() &&
                     src->scale_inv.shape() == Shape{count},
                 "Fp8Linears::load_meta: the FP8 state's shapes differ from this chunk's");
    copy(ctx_, src->history, dst->history);
    copy(ctx_, src->scale, dst->scale);
    copy_columns(ctx_, src->scale_inv.view({count, 1}), 0, dst->scale_inv, 0, 1);
  }
  ctx_.synchronize();  // the sources may be host tensors that go away
}

void Fp8Linears::update_scales(const std::vector<Collectives*>& groups) {
  if (recipe_.scaling != Fp8ScalingKind::delayed) return;
  for (Meta* meta : {&fwd_, &bwd_}) {
    const Tensor newest = meta->history.slice(0, {meta->history.dim(1)});
    for (Collectives* g : groups)
      if (g && g->size() > 1) g->all_reduce(ctx_, newest, ReduceOp::max);
  }
  fp8_scales_update(ctx_, fwd_.history, fwd_.scale, fwd_.scale_inv,
                    {fp8_max(recipe_.forward), recipe_.margin, recipe_.amax_max, true});
  fp8_scales_update(ctx_, bwd_.history, bwd_.scale, bwd_.scale_inv,
                    {fp8_max(recipe_.backward), recipe_.margin, recipe_.amax_max, true});
}

}  // namespace troupe
