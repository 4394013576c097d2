#include <cmath>

#include "kernels/grad_norm.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

GradStats grad_stats(const std::vector<Tensor>& grads) {
  GradStats stats;
  for (const Tensor& t : grads) {
    const float* x = t.data_as<float>();
    const int64_t n = t.numel();
    double sum_sq = 0.0;
    bool finite = true;
#pragma omp parallel for if (worth_parallel(n)) schedule(static) reduction(+ : sum_sq) reduction(&& : finite)
    for (int64_t i = 0; i < n; ++i) {
      sum_sq += double(x[i]) * double(x[i]);
      finite = finite && std::isfinite(x[i]);
    }
    stats.sum_sq += sum_sq;
    stats.finite = stats.finite && finite;
  }
  return stats;
}

}  // namespace troupe::cpu
