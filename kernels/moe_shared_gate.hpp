// The gate on an MoE layer's shared expert (Qwen2-MoE's shared_expert_gate): each token's
// shared-expert output is scaled by sigmoid(x . g) before it joins the routed experts' sum.
//
//   forward:  gate[n] = sigmoid(x[n] . g);   y[n] += gate[n] out[n]
//   backward: dout[n] = gate[n] dy[n];  dlogit[n] = (dy[n] . out[n]) gate[n] (1 - gate[n])
//             dx[n] += dlogit[n] g;  dg += sum_n dlogit[n] x[n]
//
// One op rather than linear layers of width 1: per-row dot products in f32, no degenerate GEMM
// shapes, and the weight gradient summed over tokens in a fixed order.
//
//   moe_shared_gate_forward(ctx, x, gate_w, out, gate, y);                  // gate f32 [N, 1]
//   moe_shared_gate_backward(ctx, x, gate_w, gate, out, dy, dout, dx, dgate_w);
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

// x, out, y: [N, C] of one float type; gate_w: [1, C], that type; gate: f32 [N, 1]
// (overwritten); y ACCUMULATES.
void moe_shared_gate_forward(const Context& ctx, const Tensor& x, const Tensor& gate_w, const Tensor& out,
                             const Tensor& gate, const Tensor& y);
// gate: from forward; dy: [N, C]; dout: [N, C] (overwritten); dx: [N, C] ACCUMULATES;
// dgate_w: f32 [1, C], ACCUMULATES.
void moe_shared_gate_backward(const Context& ctx, const Tensor& x, const Tensor& gate_w, const Tensor& gate,
                              const Tensor& out, const Tensor& dy, const Tensor& dout, const Tensor& dx,
                              const Tensor& dgate_w);

namespace cpu {
void moe_shared_gate_forward(const Tensor& x, const Tensor& gate_w, const Tensor& out, const Tensor& gate,
                             const Tensor& y);
void moe_shared_gate_backward(const Tensor& x, const Tensor& gate_w, const Tensor& gate, const Tensor& out,
                              const Tensor& dy, const Tensor& dout, const Tensor& dx, const Tensor& dgate_w);
}  // namespace cpu
namespace cuda {
void moe_shared_gate_forward(const Context& ctx, const Tensor& x, const Tensor& gate_w, const Tensor& out,
                             const Tensor& gate, const Tensor& y);
void moe_shared_gate_backward(const Context& ctx, const Tensor& x, const Tensor& gate_w, const Tensor& gate,
                              const Tensor& out, const Tensor& dy, const Tensor& dout, const Tensor& dx,
                              const Tensor& dgate_w);
}  // namespace cuda

}  // namespace troupe
