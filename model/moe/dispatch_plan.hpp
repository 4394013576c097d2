// Where each (token, choice) of a routing goes in the expert-contiguous rows the experts read:
// expert 0's rows first, then expert 1's, ...; within an expert its tokens in row order, then
// padding rows up to its capacity when --moe-pad-expert-input-to-capacity is on (Megatron pads
// with tokens whose weight is 0; zero rows contribute the same nothing).
//
//   MoeDispatchPlan plan = moe_dispatch_plan(ctx, routing, cfg.num_experts);
//   moe_permute_forward(ctx, x, plan.map, xp);                          // xp [plan.rows(), C]
//   grouped_linear_forward(ctx, xp, fc1, plan.expert_offsets, h);
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/moe_permute.hpp"
#include "model/moe/router.hpp"

namespace troupe {

struct MoeDispatchPlan {
  MoeRowMap map;                        // i32 row_choice [R], choice_row [N, K]
  std::vector<int64_t> expert_offsets;  // E + 1 row offsets (host)
  int64_t rows() const { return expert_offsets.back(); }
};

MoeDispatchPlan moe_dispatch_plan(const Context& ctx, const MoeRouting& r, int num_experts);

}  // namespace troupe
