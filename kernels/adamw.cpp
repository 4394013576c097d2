#include "kernels/adamw.hpp"

#include <algorithm>

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {
constexpr const char* kOp = "adamw_step";

void check_config(const AdamWConfig& cfg, int64_t step) {
  TROUPE_CHECK(cfg.lr >= 0.0f, kOp, ": lr must be >= 0, got ", cfg.lr);
  TROUPE_CHECK(cfg.beta1 >= 0.0f && cfg.beta1 < 1.0f, kOp, ": beta1 must be in [0, 1), got ", cfg.beta1);
  TROUPE_CHECK(cfg.beta2 >= 0.0f && cfg.beta2 < 1.0f, kOp, ": beta2 must be in [0, 1), got ", cfg.beta2);
  TROUPE_CHECK(cfg.eps >= 0.0f, kOp, ": eps must be >= 0, got ", cfg.eps);
  TROUPE_CHECK(cfg.weight_decay >= 0.0f, kOp, ": weight_decay must be >= 0, got ", cfg.weight_decay);
  TROUPE_CHECK(step >= 1, kOp, ": step counts from 1, got ", step);
}

// Every segment inside [0, numel), no two overlapping (an element must be updated once).
void check_segments(const std::vector<ParamSegment>& segments, int64_t numel) {
  std::vector<ParamSegment> sorted = segments;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  int64_t covered_until = 0;
  for (const ParamSegment& s : sorted) {
    TROUPE_CHECK(s.offset >= 0 && s.numel >= 0 && s.offset + s.numel <= numel, kOp, ": segment [", s.offset, ", ",
                 s.offset + s.numel, ") is outside the buffer of ", numel, " elements");
    if (s.numel == 0) continue;
    TROUPE_CHECK(s.offset >= covered_until, kOp, ": segment at ", s.offset, " overlaps the previous one (ending at ",
                 covered_until, ")");
    covered_until = s.offset + s.numel;
  }
}
}  // namespace

void adamw_step(const Context& ctx, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                const Tensor& params, const std::vector<ParamSegment>& segments, const AdamWConfig& cfg, int64_t step,
                float grad_scale) {
  expect_device(kOp, "master", ctx, master);
  expect_dtype(kOp, "master", master, DType::f32);
  TROUPE_CHECK(master.ndim() == 1, kOp, ": master must be a flat [P] buffer, got ", master.str());
  for (auto [name, t] : {std::pair{"m", &m}, std::pair{"v", &v}, std::pair{"grad", &grad}}) {
    expect_device(kOp, name, ctx, *t);
    expect_dtype(kOp, name, *t, DType::f32);
    expect_shape(kOp, name, *t, master.shape());
  }
  if (params.defined()) {
    expect_device(kOp, "params", ctx, params);
    if (!ctx.is_cuda()) expect_dtype(kOp, "params", params, DType::f32);
    expect_shape(kOp, "params", params, master.shape());
  }
  check_config(cfg, step);
  check_segments(segments, master.numel());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::adamw_step(ctx, master, m, v, grad, params, segments, cfg, step, grad_scale));
  else
    cpu::adamw_step(master, m, v, grad, params, segments, cfg, step, grad_scale);
}

}  // namespace troupe
