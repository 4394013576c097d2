#include "kernels/grouped_linear.hpp"

#include "base/check.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/linear.hpp"

namespace troupe {

namespace {

// Checks x [R, K], w [G, N, K] and the offsets; returns {G, N, K}.
struct GroupDims {
  int64_t groups, n, k;
};
GroupDims expect_groups(const char* op, const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets) {
  TROUPE_CHECK(x.ndim() == 2, op, ": x must be [R, K], got ", x.str());
  TROUPE_CHECK(w.ndim() == 3 && w.dim(2) == x.dim(1), op, ": w must be [G, N, K] with K = ", x.dim(1), ", got ",
               w.str());
  TROUPE_CHECK(int64_t(offsets.size()) == w.dim(0) + 1 && offsets.front() == 0 && offsets.back() == x.dim(0), op,
               ": offsets must be G + 1 = ", w.dim(0) + 1, " row offsets from 0 to R = ", x.dim(0), ", got ",
               offsets.size(), " ending at ", offsets.empty() ? -1 : offsets.back());
  for (size_t g = 0; g + 1 < offsets.size(); ++g)
    TROUPE_CHECK(offsets[g] <= offsets[g + 1], op, ": offsets must ascend, group ", g, " goes from ", offsets[g],
                 " to ", offsets[g + 1]);
  return {w.dim(0), w.dim(1), w.dim(2)};
}

Tensor rows(const Tensor& t, int64_t from, int64_t to) { return t.slice(from * t.dim(1), {to - from, t.dim(1)}); }
Tensor group(const Tensor& w, int64_t g) { return w.slice(g * w.dim(1) * w.dim(2), {w.dim(1), w.dim(2)}); }

}  // namespace

void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                            const Tensor& y) {
  constexpr const char* op = "grouped_linear_forward";
  const GroupDims d = expect_groups(op, x, w, offsets);
  expect_shape(op, "y", y, {x.dim(0), d.n});
  if (ctx.is_cuda()) {
    expect_device(op, "x", ctx, x);
    expect_device(op, "w", ctx, w);
    expect_device(op, "y", ctx, y);
    expect_dtype(op, "w", w, x.dtype());
    expect_dtype(op, "y", y, x.dtype());
    TROUPE_ON_CUDA(cuda::grouped_linear_forward(ctx, x, w, offsets, y));
    return;
  }
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from == to) continue;
    linear_forward(ctx, rows(x, from, to), group(w, g), Tensor(), rows(y, from, to));
  }
}

void grouped_linear_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& offsets,
                            const Tensor& y) {
  constexpr const char* op = "grouped_linear_forward";
  expect_device(op, "offsets", ctx, offsets);
  expect_dtype(op, "offsets", offsets, DType::i32);
  TROUPE_CHECK(w.ndim() == 3 && offsets.ndim() == 1 && offsets.dim(0) == w.dim(0) + 1, op,
               ": offsets must be i32 [G + 1] for w [G, N, K], got ", offsets.str(), " and ", w.str());
  if (!ctx.is_cuda()) {  // the reference: the host loop over the same offsets
    const int32_t* o = offsets.data_as<int32_t>();
    grouped_linear_forward(ctx, x, w, std::vector<int64_t>(o, o + offsets.numel()), y);
    return;
  }
  TROUPE_CHECK(x.ndim() == 2 && w.dim(2) == x.dim(1), op, ": x must be [R, K] with K = ", w.dim(2), ", got ", x.str());
  expect_shape(op, "y", y, {x.dim(0), w.dim(1)});
  for (auto [name, t] : {std::pair{"x", &x}, std::pair{"w", &w}, std::pair{"y", &y}}) {
    expect_device(op, name, ctx, *t);
    expect_dtype(op, name, *t, x.dtype());
  }
  TROUPE_ON_CUDA(cuda::grouped_linear_forward(ctx, x, w, offsets, y));
}

void grouped_linear_backward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const std::vector<int64_t>& offsets, const Tensor& dx, const Tensor& dw) {
  constexpr const char* op = "grouped_linear_backward";
  const GroupDims d = expect_groups(op, x, w, offsets);
  expect_shape(op, "dy", dy, {x.dim(0), d.n});
  if (dx.defined()) expect_shape(op, "dx", dx, x.shape());
  expect_shape(op, "dw", dw, w.shape());
  if (ctx.is_cuda()) {
    for (auto [name, t] : {std::pair{"dy", &dy}, std::pair{"x", &x}, std::pair{"w", &w}, std::pair{"dw", &dw}})
      expect_device(op, name, ctx, *t);
    expect_dtype(op, "dy", dy, x.dtype());
    expect_dtype(op, "w", w, x.dtype());
    expect_dtype(op, "dw", dw, DType::f32);
    if (dx.defined()) {
      expect_device(op, "dx", ctx, dx);
      expect_dtype(op, "dx", dx, x.dtype());
    }
    TROUPE_ON_CUDA(cuda::grouped_linear_backward(ctx, dy, x, w, offsets, dx, dw));
    return;
  }
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t from = offsets[size_t(g)], to = offsets[size_t(g) + 1];
    if (from == to) continue;
    linear_backward(ctx, rows(dy, from, to), rows(x, from, to), group(w, g),
                    dx.defined() ? rows(dx, from, to) : Tensor(), group(dw, g), Tensor());
  }
}

}  // namespace troupe
