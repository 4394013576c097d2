#include "actors/train/checkpoint_finite.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

// Index of the first inf/NaN of x[0, n), or n. The sum of x * 0 is 0 unless some x is inf or
// NaN: one pass the compiler vectorizes; the element is looked for only then.
int64_t first_non_finite(const float* x, int64_t n) {
  float poison = 0.0f;
  for (int64_t i = 0; i < n; ++i) poison += x[i] * 0.0f;
  if (poison == 0.0f) return n;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return n;
}

}  // namespace

void check_chunk_state_finite(const ChunkState& s) {
  for (const auto& [prefix, packed] : s.tensors) {
    TROUPE_CHECK(packed.dtype() == DType::f32, "checkpoint snapshot: tensor '", prefix, "' is ",
                 dtype_name(packed.dtype()), ", expected f32");
    const float* data = packed.data_as<float>();
    int64_t packed_start = 0;  // where the current range starts in the packed tensor
    for (const OptimizerShard::Range& r : s.ranges) {
      for (const ParamInfo& p : s.layout.params()) {
        const int64_t lo = std::max(r.begin, p.offset), hi = std::min(r.end, p.offset + p.numel());
        if (lo >= hi) continue;
        const int64_t at = first_non_finite(data + packed_start + (lo - r.begin), hi - lo);
        if (at == hi - lo) continue;
        const float value = data[packed_start + (lo - r.begin) + at];
        TROUPE_FAIL("tensor '", prefix, p.name, "' holds ", std::isnan(value) ? "NaN" : "inf", " (element ",
                    lo - p.offset + at, " of this rank's ", p.numel(),
                    "): the model diverged, so this checkpoint is not written");
      }
      packed_start += r.end - r.begin;
    }
  }
}

}  // namespace troupe::actors
