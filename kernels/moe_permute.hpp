// Mixture-of-experts token dispatch on one device: tokens copied into expert-contiguous rows
// (permute), expert outputs summed back into token order weighted by the routing probs
// (unpermute), and their backwards. Megatron-Core's permute / unpermute (moe_utils.py) with the
// routing map given as two index maps, so every op is a gather (deterministic, no atomics):
//
//   row_choice  i32 [R]     the (token, choice) each permuted row holds, as n * K + k;
//                           -1: a padding row (zeros in, nothing out: capacity padding)
//   choice_row  i32 [N, K]  the permuted row of each token's k-th choice; -1: dropped
//
//   moe_permute_forward(ctx, x, map, xp);            // xp[r] = x[row_choice[r] / K]
//   ... experts turn xp [R, C] into yp [R, C] ...
//   moe_unpermute_forward(ctx, yp, map, probs, y);   // y[n] = sum_k probs[n, k] yp[choice_row[n, k]]
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

struct MoeRowMap {
  Tensor row_choice;  // i32 [R]
  Tensor choice_row;  // i32 [N, K]
};

// x: [N, C]; xp: [R, C] (overwritten; padding rows zero).
void moe_permute_forward(const Context& ctx, const Tensor& x, const MoeRowMap& map, const Tensor& xp);
// dxp: [R, C]; dx: [N, C] (overwritten): dx[n] = sum over kept k of dxp[choice_row[n, k]].
void moe_permute_backward(const Context& ctx, const Tensor& dxp, const MoeRowMap& map, const Tensor& dx);
// yp: [R, C]; probs: f32 [N, K]; y: [N, C] (overwritten), summed in f32.
void moe_unpermute_forward(const Context& ctx, const Tensor& yp, const MoeRowMap& map, const Tensor& probs,
                           const Tensor& y);
// dy: [N, C]; yp, probs as forward. dyp: [R, C] (overwritten): dyp[r] = probs[n, k] dy[n] for
// r = choice_row[n, k], zero on padding rows. dprobs: f32 [N, K] (overwritten):
// dprobs[n, k] = dy[n] . yp[choice_row[n, k]], zero for a dropped choice.
void moe_unpermute_backward(const Context& ctx, const Tensor& dy, const Tensor& yp, const MoeRowMap& map,
                            const Tensor& probs, const Tensor& dyp, const Tensor& dprobs);

namespace cpu {
void moe_permute_forward(const Tensor& x, const MoeRowMap& map, const Tensor& xp);
void moe_permute_backward(const Tensor& dxp, const MoeRowMap& map, const Tensor& dx);
void moe_unpermute_forward(const Tensor& yp, const MoeRowMap& map, const Tensor& probs, const Tensor& y);
void moe_unpermute_backward(const Tensor& dy, const Tensor& yp, const MoeRowMap& map, const Tensor& probs,
                            const Tensor& dyp, const Tensor& dprobs);
}  // namespace cpu
namespace cuda {
void moe_permute_forward(const Context& ctx, const Tensor& x, const MoeRowMap& map, const Tensor& xp);
void moe_permute_backward(const Context& ctx, const Tensor& dxp, const MoeRowMap& map, const Tensor& dx);
void moe_unpermute_forward(const Context& ctx, const Tensor& yp, const MoeRowMap& map, const Tensor& probs,
                           const Tensor& y);
void moe_unpermute_backward(const Context& ctx, const Tensor& dy, const Tensor& yp, const MoeRowMap& map,
                            const Tensor& probs, const Tensor& dyp, const Tensor& dprobs);
}  // namespace cuda

}  // namespace troupe
