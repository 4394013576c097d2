// Which (token, choice) pairs of an MoE routing reach their experts, and where: the kept
// choices per expert, the capacity drop (Megatron-Core's apply_router_token_dropping) and the
// row maps the permute kernels read (kernels/moe_permute.hpp). Deterministic on both backends:
// CUDA orders choices with a stable radix sort, never with atomics on positions.
//
//   moe_capacity_drop(ctx, experts, probs, /*seq_length=*/T, capacity, /*by_probs=*/true, kept);
//   moe_expert_counts(ctx, experts, kept, counts);                   // f32 [E]
//   moe_row_map(ctx, experts, kept, expert_offsets, map);            // offsets: E + 1, host
//
// Dropless with the offsets left on the device (no host synchronization; CUDA-graph capturable):
//   moe_expert_offsets(ctx, experts, offsets);                       // i32 [E + 1] on ctx's device
//   moe_row_map(ctx, experts, Tensor(), offsets, map);               // R = N * K rows
//
// Token order: rows are Troupe's [B, T] (row n = b * T + t). Megatron drops in its [T, B]
// order: the "position" policy keeps, per expert, the choices whose tokens come first in that
// order; the "probs" policy the highest probs, ties to the earlier token in that order.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/moe_permute.hpp"

namespace troupe {

// experts: i32 [N, K]; kept: u8 [N, K] or undefined (every choice kept); counts: f32 [E]
// (overwritten): the kept choices of each expert (exact integers in f32).
void moe_expert_counts(const Context& ctx, const Tensor& experts, const Tensor& kept, const Tensor& counts);
// experts: i32 [N, K] (indices < E = num_experts); probs: f32 [N, K], dropped choices set to 0;
// kept: u8 [N, K] (overwritten): 1 for the choices among their expert's `capacity` first under
// the policy (by probs, else by position). capacity <= 0: dropless, every choice kept.
// N must be whole sequences of seq_length.
void moe_capacity_drop(const Context& ctx, const Tensor& experts, const Tensor& probs, int num_experts,
                       int64_t seq_length, int64_t capacity, bool by_probs, const Tensor& kept);
// experts: i32 [N, K] (indices < E); offsets: i32 [E + 1] on ctx's device (overwritten): where
// each expert's rows begin when every choice is kept, offsets[e] = the choices of experts
// below e (offsets[E] = N * K). Integer counts: exact and deterministic.
void moe_expert_offsets(const Context& ctx, const Tensor& experts, const Tensor& offsets);
// map.row_choice i32 [R] and map.choice_row i32 [N, K] (overwritten): expert e's kept choices
// in ascending choice order at rows [offsets[e], ...), then padding rows (-1) up to
// offsets[e + 1]; dropped choices get row -1. kept: u8 [N, K], or undefined (every choice
// kept). expert_offsets: E + 1 host offsets, each expert's range at least its kept count.
void moe_row_map(const Context& ctx, const Tensor& experts, const Tensor& kept,
                 const std::vector<int64_t>& expert_offsets, const MoeRowMap& map);
// The same with the offsets an i32 [E + 1] tensor on ctx's device (moe_expert_offsets'), R =
// map.row_choice's length. On CUDA nothing reads them on the host, so they are not checked
// there: each expert's range must hold its kept choices (the CPU backend checks).
void moe_row_map(const Context& ctx, const Tensor& experts, const Tensor& kept, const Tensor& expert_offsets,
                 const MoeRowMap& map);

namespace cpu {
void moe_expert_counts(const Tensor& experts, const Tensor& kept, const Tensor& counts);
void moe_capacity_drop(const Tensor& experts, const Tensor& probs, int num_experts, int64_t seq_length,
                       int64_t capacity, bool by_probs, const Tensor& kept);
void moe_expert_offsets(const Tensor& experts, const Tensor& offsets);
void moe_row_map(const Tensor& experts, const Tensor& kept, const std::vector<int64_t>& expert_offsets,
                 const MoeRowMap& map);
}  // namespace cpu
namespace cuda {
void moe_expert_counts(const Context& ctx, const Tensor& experts, const Tensor& kept, const Tensor& counts);
void moe_capacity_drop(const Context& ctx, const Tensor& experts, const Tensor& probs, int num_experts,
                       int64_t seq_length, int64_t capacity, bool by_probs, const Tensor& kept);
void moe_expert_offsets(const Context& ctx, const Tensor& experts, const Tensor& offsets);
void moe_row_map(const Context& ctx, const Tensor& experts, const Tensor& kept,
                 const std::vector<int64_t>& expert_offsets, const MoeRowMap& map);
void moe_row_map(const Context& ctx, const Tensor& experts, const Tensor& kept, const Tensor& expert_offsets,
                 const MoeRowMap& map);
}  // namespace cuda

}  // namespace troupe
