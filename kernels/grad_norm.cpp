#include "kernels/grad_norm.hpp"

#include <cmath>
#include <limits>

#include "kernels/dispatch.hpp"

namespace troupe {

double GradStats::norm() const { return finite ? std::sqrt(sum_sq) : std::numeric_limits<double>::quiet_NaN(); }

GradStats grad_stats(const Context& ctx, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string name = str_cat("grads[", i, "]");
    expect_device("grad_stats", name.c_str(), ctx, grads[i]);
    expect_dtype("grad_stats", name.c_str(), grads[i], DType::f32);
  }
  if (ctx.is_cuda()) TROUPE_ON_CUDA(return cuda::grad_stats(ctx, grads));
  return cpu::grad_stats(grads);
}

float clip_coefficient(const GradStats& s, float max_norm) {
  // A non-finite step is skipped by the loss scaler; nothing to clip then.
  if (max_norm <= 0.0f || !s.finite) return 1.0f;
  const double coef = double(max_norm) / (s.norm() + 1e-6);
  return coef < 1.0 ? float(coef) : 1.0f;
}

}  // namespace troupe
