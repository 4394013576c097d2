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
  m.scale_inv = Tensor::empty(ctx, DType::f32, {count});
  copy(ctx, ones, m.scale);
  copy(ctx, ones, m.scale_inv);
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

void Fp8Linears::current_scale(Meta& meta, int t, Fp8Format f, const Tensor& x) {
  const Tensor amax = meta.history.slice(t, {1});  // row 0, column t
  fill_zero(ctx_, amax);
  fp8_amax(ctx_, x, amax);
  for (Collectives* g : cast_groups_) g->all_reduce(ctx_, amax, ReduceOp::max);
  fp8_scales_update(ctx_, amax.view({1, 1}), meta.scale.slice(t, {1}), meta.scale_inv.slice(t, {1}),
                    {fp8_max(f), 0, false, false});
}

Fp8Operand Fp8Linears::cast(Fp8Format f, const Tensor& x, const Tensor& scale, const Tensor& scale_inv, Tensor& q) {
  const Tensor bytes_of_x = bytes(q, x.shape());
  fp8_cast(ctx_, x, scale, f, bytes_of_x);
  return {bytes_of_x, f, scale_inv};
}

Fp8Operand Fp8Linears::quantize(Meta& meta, int t, Fp8Format f, const Tensor& x, Tensor& q, bool record) {
  if (recipe_.scaling == Fp8ScalingKind::tensorwise)
    current_scale(meta, t, f, x);
  else if (record)
    fp8_amax(ctx_, x, meta.history.slice(t, {1}));
  return cast(f, x, meta.scale.slice(t, {1}), meta.scale_inv.slice(t, {1}), q);
}

void Fp8Linears::forward(int linear, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool record) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  const Fp8Operand qx = quantize(fwd_, 2 * linear, recipe_.forward, x, qx_, record);
  const Fp8Operand qw = quantize(fwd_, 2 * linear + 1, recipe_.forward, w, qw_, record);
  fp8_gemm(ctx_, qx, qw, y, 0.0f, b);
}

void Fp8Linears::dgrad(const Fp8Operand& qdy, int linear, const Tensor& w, const Tensor& dx) {
  // dx[M, K] = dy[M, N] w[N, K]: w^T [K, N] K-major for the TN GEMM
  const Fp8Operand qw = quantize(fwd_, 2 * linear + 1, recipe_.forward, w, qw_);
  const Tensor wt = bytes(qt_a_, {w.dim(1), w.dim(0)});
  fp8_transpose(ctx_, qw.data, wt);
  fp8_gemm(ctx_, qdy, {wt, qw.format, qw.scale_inv}, dx);
}

void Fp8Linears::wgrad(const Fp8Operand& qdy, const Fp8Operand& qx, const Tensor& dy, const Tensor& x, const Tensor& w,
                       const Tensor& dw, const Tensor& db) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  if (dw.defined() && recipe_.wgrad) {  // dw[N, K] += dy^T [N, M] x^T [K, M]^T
    const Tensor dyt = bytes(qt_a_, {n, m}), xt = bytes(qt_b_, {k, m});
    fp8_transpose(ctx_, qdy.data, dyt);
    fp8_transpose(ctx_, qx.data, xt);
    fp8_gemm(ctx_, {dyt, qdy.format, qdy.scale_inv}, {xt, qx.format, qx.scale_inv}, dw, 1.0f);
  }
  // The bias gradient from dy as it is, and --no-fp8-wgrad's weight gradient in the compute dtype.
  const Tensor dw_high = recipe_.wgrad ? Tensor() : dw;
  if (db.defined() || dw_high.defined()) linear_backward(ctx_, dy, x, w, Tensor(), dw_high, db);
}

void Fp8Linears::backward(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                          const Tensor& dw, const Tensor& db) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  const bool fp8_wgrad = dw.defined() && recipe_.wgrad;
  Fp8Operand qdy, qx;
  if (dx.defined() || fp8_wgrad) qdy = quantize(bwd_, linear, recipe_.backward, dy, qdy_);
  if (dx.defined()) dgrad(qdy, linear, w, dx);
  if (fp8_wgrad) qx = quantize(fwd_, 2 * linear, recipe_.forward, x, qx_);
  wgrad(qdy, qx, dy, x, w, dw, db);
}

void Fp8Linears::backward_input(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                                const Tensor& wgrad_scales) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  TROUPE_CHECK(wgrad_scales.dtype() == DType::f32 && wgrad_scales.numel() == 4,
               "Fp8Linears::backward_input: wgrad_scales must be f32 [4]");
  const Fp8Operand qdy = quantize(bwd_, linear, recipe_.backward, dy, qdy_);
  if (dx.defined()) dgrad(qdy, linear, w, dx);
  if (!recipe_.wgrad) return;  // W's GEMM takes dy and x unquantized
  // x's scale as backward's cast of x would take it (delayed: the forward's, unchanged until
  // update_scales; its amax recorded by the forward already).
  if (recipe_.scaling == Fp8ScalingKind::tensorwise) current_scale(fwd_, 2 * linear, recipe_.forward, x);
  const int tx = 2 * linear;
  copy(ctx_, fwd_.scale.slice(tx, {1}), wgrad_scales.slice(0, {1}));
  copy(ctx_, fwd_.scale_inv.slice(tx, {1}), wgrad_scales.slice(1, {1}));
  copy(ctx_, bwd_.scale.slice(linear, {1}), wgrad_scales.slice(2, {1}));
  copy(ctx_, bwd_.scale_inv.slice(linear, {1}), wgrad_scales.slice(3, {1}));
}

void Fp8Linears::backward_weight(int linear, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                                 const Tensor& db, const Tensor& wgrad_scales) {
  TROUPE_CHECK(linear >= 0 && linear < count_, "Fp8Linears: linear ", linear, " of ", count_);
  Fp8Operand qdy, qx;
  if (dw.defined() && recipe_.wgrad) {
    const Tensor& s = wgrad_scales;
    qx = cast(recipe_.forward, x, s.slice(0, {1}), s.slice(1, {1}), qx_);
    qdy = cast(recipe_.backward, dy, s.slice(2, {1}), s.slice(3, {1}), qdy_);
  }
  wgrad(qdy, qx, dy, x, w, dw, db);
}

void Fp8Linears::load_meta(const Meta& forward, const Meta& backward) {
  for (const auto& [dst, src] : {std::pair{&fwd_, &forward}, std::pair{&bwd_, &backward}}) {
    TROUPE_CHECK(src->history.shape() == dst->history.shape() && src->scale.shape() == dst->scale.shape() &&
                     src->scale_inv.shape() == dst->scale_inv.shape(),
                 "Fp8Linears::load_meta: the FP8 state's shapes differ from this chunk's");
    copy(ctx_, src->history, dst->history);
    copy(ctx_, src->scale, dst->scale);
    copy(ctx_, src->scale_inv, dst->scale_inv);
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
