// Expert parallelism's token exchange (Megatron-Core's MoEAlltoAllTokenDispatcher): the E
// experts of an MoE layer are split over the EP members of an expert group, member r holding
// experts [r*E/EP, (r+1)*E/EP). Every member routes its own tokens over all E experts and lays
// them out expert-contiguous (dispatch_plan.hpp); since each member's experts are a contiguous
// run of that layout, member q's rows go to it in one all_to_all_v part. The receiver gets them
// grouped by source member, then by expert, and reorders them by expert, then source member,
// for its grouped GEMM; combine undoes both steps. It only moves rows, so every backend of
// Collectives (in-process, MPI, NCCL) runs it.
//
//   MoeExpertExchange ex = moe_expert_exchange(ctx, group, plan.expert_offsets);   // counts first
//   moe_expert_dispatch(ctx, group, ex, xp, xp_local);          // [R, C] -> [ex.local_rows(), C]
//   moe_experts_forward(ctx, swiglu, fc1_local, fc2_local, xp_local, ex.local_offsets, acts, out_local);
//   moe_expert_combine(ctx, group, ex, out_local, expert_out);  // [ex.local_rows(), C] -> [R, C]
// Backward uses the same two: dispatch the output gradient's rows, combine the input gradient's.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/collectives.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// Who sends how many rows where, for one forward (host counts; the backward reuses them).
struct MoeExpertExchange {
  int members = 1, rank = 0, local_experts = 0;
  std::vector<int64_t> send_rows;         // [EP]: rows this member sends to each member
  std::vector<int64_t> recv_rows;         // [EP]: rows each member sends to this one
  std::vector<int64_t> recv_expert_rows;  // [EP * E_local]: at q*E_local + j, member q's rows for local expert j
  std::vector<int64_t> local_offsets;     // E_local + 1: row offsets of the local experts (received rows)
  int64_t sent_rows() const;              // sum(send_rows): this member's R
  int64_t local_rows() const { return local_offsets.back(); }
};

// Every member of `group` calls it, with its own dispatch plan's E + 1 expert row offsets (E a
// multiple of the group's size). One small all-to-all of E counts (on a GPU a host sync, as
// the dropless dispatch needs its counts on the host anyway).
MoeExpertExchange moe_expert_exchange(const Context& ctx, Collectives& group,
                                      const std::vector<int64_t>& expert_offsets);

// rows: [sent_rows(), C] in all-experts order; local: [local_rows(), C] (overwritten), in
// local expert order. Every member calls it.
void moe_expert_dispatch(const Context& ctx, Collectives& group, const MoeExpertExchange& ex, const Tensor& rows,
                         const Tensor& local);
// The reverse: local [local_rows(), C] -> rows [sent_rows(), C] (overwritten), each row back on
// the member and at the place it came from. Every member calls it.
void moe_expert_combine(const Context& ctx, Collectives& group, const MoeExpertExchange& ex, const Tensor& local,
                        const Tensor& rows);

}  // namespace troupe
