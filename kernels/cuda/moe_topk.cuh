// Per-token top-k over the experts' scores, one thread a token: the routing kernels
// (moe_routing.cu) and the load-balancing counts (moe_router_losses.cu) pick the same way.
#pragma once

#include <cstdint>

namespace troupe::cuda {

constexpr int kMaxTopk = 32;  // picks kept in registers per thread

// pick[0, k) <- the indices of the k largest score(j), j in [0, e), largest first; equal scores
// keep the lower index (as the CPU's partial_sort in kernels/cpu/moe_routing.cpp). k <= kMaxTopk.
template <typename Score>
__device__ void moe_pick_topk(int e, int k, Score score, int32_t* pick) {
  for (int i = 0; i < k; ++i) {
    int best = -1;
    float best_score = 0.0f;
    for (int j = 0; j < e; ++j) {
      bool taken = false;
      for (int q = 0; q < i; ++q) taken |= pick[q] == j;
      if (taken) continue;
      const float s = score(j);
      if (best < 0 || s > best_score) {  // strict: ties keep the lower index
        best = j;
        best_score = s;
      }
    }
    pick[i] = best;
  }
}

}  // namespace troupe::cuda
