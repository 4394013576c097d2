// Random inputs for the op benchmarks (bench/attention_bench.cpp, norm_bench.cpp): normal values
// drawn on the host from a seeded mt19937_64, so every run and backend times the same data.
//
//   Tensor x = troupe::bench::random_normal(ctx, DType::bf16, {B, T, C}, /*seed=*/1);
#pragma once

#include <cstdint>

#include "kernels/tensor.hpp"

namespace troupe::bench {

// A tensor of `shape` on ctx in `dtype`, its values N(mean, stddev) drawn in f32 and converted.
Tensor random_normal(const Context& ctx, DType dtype, Shape shape, uint64_t seed, float mean = 0.0f,
                     float stddev = 1.0f);

}  // namespace troupe::bench
