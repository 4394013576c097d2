// Token embedding plus optional learned absolute position embedding.
//   out[b, t, :] = wte[tokens[b, t], :] + wpe[pos_offset + t, :]      (wpe may be undefined)
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// tokens: i32 [B, T], values in [0, V); wte: [V, C]; wpe: [P, C] or undefined; out: [B, T, C].
// A token id outside [0, V) is an error on the CPU (thrown). CUDA kernels cannot throw and
// the dispatcher does not read tokens back: forward clamps such an id, backward skips it.
void embedding_forward(const Context& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Tensor& out, int64_t pos_offset = 0);
// dwte [V, C] f32 += scatter-add of dout rows; dwpe [P, C] f32 += sum over batch (if defined).
void embedding_backward(const Context& ctx, const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                        const Tensor& dwpe, int64_t pos_offset = 0);

namespace cpu {
void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out, int64_t pos_offset);
void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe, int64_t pos_offset);
}  // namespace cpu
namespace cuda {
void embedding_forward(const Context& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out, int64_t pos_offset);
void embedding_backward(const Context& ctx, const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe, int64_t pos_offset);
}  // namespace cuda

}  // namespace troupe
