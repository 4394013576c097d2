// FLOP counts of causal attention, as the attention and prefill benchmarks report throughput.
//
//   double flop = troupe::bench::causal_attention_forward_flop(B, T, H, D, W);
#pragma once

#include <cstdint>

namespace troupe::bench {

// Forward FLOPs of causal attention: 4 B H D per visible (query, key) pair (two matmuls), with
// T^2 / 2 pairs (as flash-attention papers count it), or under a window W < T
// W (W + 1) / 2 + (T - W) W; W = 0 (or W >= T) is unbounded.
double causal_attention_forward_flop(int64_t B, int64_t T, int64_t H, int64_t D, int64_t W);

}  // namespace troupe::bench
