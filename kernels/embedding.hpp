// Token embedding plus optional learned absolute position embedding.
//   out[b, t, :] = wte[tokens[b, t], :] + wpe[pos_offset + t, :]      (wpe may be undefined)
//
// Under tensor parallelism the token table is split by vocabulary rows: rank r holds rows
// [start, start + Vl) of the padded table, and a token id outside that range contributes a
// zero row (its rank's all-reduce of out supplies the real one):
//   embedding_forward(ctx, tokens, wte_shard, Tensor(), out, 0, VocabShard{true, tp.rank() * Vl});
//   tp.all_reduce(ctx, out);   // out <- the full embedding (sum over the group)
// wpe, when given, is added on every rank (pass it on one rank only, or after the all-reduce).
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// Which rows of the padded token table a wte (dwte) argument holds. The default is the
// whole table.
struct VocabShard {
  bool sharded = false;
  int64_t start = 0;  // global id of wte's row 0 (>= 0)
};

// tokens: i32 [B, T]; wte: [Vl, C]; wpe: [P, C] or undefined; out: [B, T, C].
// Unsharded (Vl = V): a token id outside [0, V) is an error on the CPU (thrown). CUDA kernels
// cannot throw and the dispatcher does not read tokens back: forward clamps such an id,
// backward skips it.
// Sharded: an id outside [start, start + Vl) gives a zero token row (out = wpe row, or 0) on
// both backends; a negative id is still an error on the CPU.
void embedding_forward(const Context& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Tensor& out, int64_t pos_offset = 0, const VocabShard& shard = {});
// dwte [Vl, C] f32 += scatter-add of dout rows whose id falls in the shard (every row when
// unsharded); dwpe [P, C] f32 += sum over batch of all of dout (if defined), sharded or not.
void embedding_backward(const Context& ctx, const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                        const Tensor& dwpe, int64_t pos_offset = 0, const VocabShard& shard = {});

namespace cpu {
void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out,
                       int64_t pos_offset, const VocabShard& shard);
void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe,
                        int64_t pos_offset, const VocabShard& shard);
}  // namespace cpu
namespace cuda {
void embedding_forward(const Context& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Tensor& out, int64_t pos_offset, const VocabShard& shard);
void embedding_backward(const Context& ctx, const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                        const Tensor& dwpe, int64_t pos_offset, const VocabShard& shard);
}  // namespace cuda

}  // namespace troupe
