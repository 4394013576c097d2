// The op benchmarks' random inputs (random_tensor.hpp).
#include "bench/common/random_tensor.hpp"

#include <random>
#include <utility>

namespace troupe::bench {

Tensor random_normal(const Context& ctx, DType dtype, Shape shape, uint64_t seed, float mean, float stddev) {
  Tensor h = Tensor::host(DType::f32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(mean, stddev);
  for (int64_t i = 0; i < h.numel(); ++i) h.data_as<float>()[i] = normal(rng);
  return to_device(ctx, h, dtype);
}

}  // namespace troupe::bench
