#include "kernels/dropout.hpp"
#include "kernels/philox.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

namespace {
// out[i] = keep(offset + i) ? in[i] / (1 - p) : 0. One Philox call serves the (up to) four
// elements that share a counter; forward and backward apply the same mask.
void apply_dropout_mask(const float* in, float* out, int64_t n, float p, uint64_t seed, uint64_t offset) {
  if (n == 0) return;
  const float scale = 1.0f / (1.0f - p);
  const int64_t first_counter = int64_t(offset / 4);
  const int64_t counters = int64_t((offset + uint64_t(n) - 1) / 4) - first_counter + 1;
#pragma omp parallel for if (worth_parallel(counters * 4)) schedule(static)
  for (int64_t c = 0; c < counters; ++c) {
    const uint64_t counter = uint64_t(first_counter + c);
    const PhiloxWords r = philox4x32_10(counter, seed);
    for (int w = 0; w < 4; ++w) {
      const int64_t i = int64_t(counter * 4 + uint64_t(w) - offset);
      if (i < 0 || i >= n) continue;
      out[i] = philox_uniform(r.w[w]) >= p ? in[i] * scale : 0.0f;
    }
  }
}
}  // namespace

void dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t offset) {
  apply_dropout_mask(x.data_as<float>(), y.data_as<float>(), x.numel(), p, seed, offset);
}

void dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed, uint64_t offset) {
  apply_dropout_mask(dy.data_as<float>(), dx.data_as<float>(), dy.numel(), p, seed, offset);
}

}  // namespace troupe::cpu
