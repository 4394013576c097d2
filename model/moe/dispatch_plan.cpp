#include "model/moe/dispatch_plan.hpp"

#include "base/check.hpp"
#include "kernels/moe_dispatch.hpp"

namespace troupe {

MoeDispatchPlan moe_dispatch_plan(const Context& ctx, const MoeRouting& r, int num_experts) {
  const int64_t n = r.experts.dim(0), k = r.experts.dim(1);
  TROUPE_CHECK(int64_t(r.expert_rows.size()) == num_experts, "moe_dispatch_plan: ", r.expert_rows.size(),
               " expert row counts for ", num_experts, " experts");
  MoeDispatchPlan plan;
  plan.expert_offsets.assign(size_t(num_experts) + 1, 0);
  for (int j = 0; j < num_experts; ++j)
    plan.expert_offsets[size_t(j) + 1] = plan.expert_offsets[size_t(j)] + r.expert_rows[size_t(j)];
  plan.map.row_choice = Tensor::stream_ordered(ctx, DType::i32, {plan.rows()});
  plan.map.choice_row = Tensor::stream_ordered(ctx, DType::i32, {n, k});
  moe_row_map(ctx, r.experts, r.kept, plan.expert_offsets, plan.map);
  return plan;
}

}  // namespace troupe
