// A context rank's share of a whole-sequence tensor, for the ring tests: the rows of a host f32
// [B, T, w] tensor (or the entries of an lse [B, H, T]) at the rank's global positions
// (model/context_parallel.hpp's context_position), as host f32 [B, Tl, w] (or [B, H, Tl]).
#pragma once

#include "kernels/tensor.hpp"
#include "model/context_parallel.hpp"

namespace troupe::test {

inline Tensor context_rows(const ContextParallel& cp, const Tensor& whole, int64_t Tl, bool is_lse) {
  const int64_t T = is_lse ? whole.dim(2) : whole.dim(1);
  const int64_t outer = is_lse ? whole.dim(0) * whole.dim(1) : whole.dim(0), w = is_lse ? 1 : whole.dim(2);
  Tensor part = Tensor::host(DType::f32, is_lse ? Shape{whole.dim(0), whole.dim(1), Tl} : Shape{whole.dim(0), Tl, w});
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t t = 0; t < Tl; ++t)
      for (int64_t i = 0; i < w; ++i)
        part.data_as<float>()[(o * Tl + t) * w + i] =
            whole.data_as<float>()[(o * T + context_position(cp, Tl, t)) * w + i];
  return part;
}

}  // namespace troupe::test
