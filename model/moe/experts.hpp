// The experts of an MoE MLP: routed experts as grouped GEMMs over expert-contiguous rows, and
// the shared expert (Qwen-MoE, DeepSeek) as one dense MLP over every token.
//
//   routed:  yp[rows of e] = act(xp[rows of e] · fc1[e]^T) · fc2[e]^T
//   shared:  y += gate * act(x · shared_fc1^T) · shared_fc2^T,   gate = sigmoid(x · g^T) or 1
// act: SwiGLU (fc1 rows [gate | up], Megatron's GLU and HF's gate_up_proj layout) or GELU (tanh).
// No biases: Megatron's MoE is run with --disable-bias-linear by the models it serves
// (Mixtral, Qwen-MoE, DeepSeek).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

struct MoeExpertActivations {
  Tensor fc1;  // [R, F1]  (F1 = 2F with SwiGLU, else F)
  Tensor act;  // [R, F]
};

// fc1: [E, F1, C]; fc2: [E, C, F]; xp: [R, C]; offsets: E + 1 host row offsets; yp: [R, C].
void moe_experts_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2, const Tensor& xp,
                         const std::vector<int64_t>& offsets, MoeExpertActivations& a, const Tensor& yp);
// The same with the offsets i32 [E + 1] on ctx's device (kernels/grouped_linear.hpp) and the
// activations the caller's, a.fc1 [R, F1] and a.act [R, F]: nothing allocated, nothing waits for
// the host (the inference MoE MLP under CUDA graphs).
void moe_experts_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2, const Tensor& xp,
                         const Tensor& offsets, const MoeExpertActivations& a, const Tensor& yp);
// dyp: [R, C]; dxp: [R, C] (overwritten); dfc1, dfc2: f32, accumulate.
void moe_experts_backward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2, const Tensor& xp,
                          const std::vector<int64_t>& offsets, const MoeExpertActivations& a, const Tensor& dyp,
                          const Tensor& dxp, const Tensor& dfc1, const Tensor& dfc2);

struct SharedExpertActivations {
  Tensor fc1;   // [N, S1]
  Tensor act;   // [N, S]
  Tensor out;   // [N, C] before the gate
  Tensor gate;  // f32 [N, 1]: sigmoid(x · g^T); undefined without a gate
};

// fc1: [S1, C]; fc2: [C, S]; gate_w: [1, C] or undefined; x: [N, C]; y: [N, C] ACCUMULATES.
// Allocates a (moe_shared_expert_allocate), then the three steps below in turn.
void moe_shared_expert_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2,
                               const Tensor& gate_w, const Tensor& x, SharedExpertActivations& a, const Tensor& y);
// a sized for x (stream-ordered memory): a.fc1 [N, S1], a.act [N, S], a.out [N, C], a.gate
// f32 [N, 1] with a gate.
void moe_shared_expert_allocate(const Context& ctx, const Tensor& fc1, const Tensor& fc2, const Tensor& gate_w,
                                const Tensor& x, SharedExpertActivations& a);
// The same into the caller's activations: nothing allocated.
void moe_shared_expert_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2,
                               const Tensor& gate_w, const Tensor& x, const SharedExpertActivations& a,
                               const Tensor& y);
// The steps, apart for running them beside an expert-parallel layer's all-to-alls (moe_mlp.cpp):
// a.fc1, a.act = act(x · fc1^T); a.out = a.act · fc2^T; y += gate * a.out (a.gate set).
void moe_shared_expert_hidden(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& x,
                              const SharedExpertActivations& a);
void moe_shared_expert_project(const Context& ctx, const Tensor& fc2, const SharedExpertActivations& a);
void moe_shared_expert_add(const Context& ctx, const Tensor& gate_w, const Tensor& x, const SharedExpertActivations& a,
                           const Tensor& y);
// dx [N, C] ACCUMULATES; dfc1, dfc2, dgate_w: f32, accumulate. The two steps below, in turn.
void moe_shared_expert_backward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2,
                                const Tensor& gate_w, const Tensor& x, const SharedExpertActivations& a,
                                const Tensor& dy, const Tensor& dx, const Tensor& dfc1, const Tensor& dfc2,
                                const Tensor& dgate_w);

// The gate's and fc2's backward and the activation's: dh [N, S1] (overwritten), the gate's part
// of dx (accumulates); then fc1's: dx += dh · fc1.
void moe_shared_expert_backward_output(const Context& ctx, bool swiglu, const Tensor& fc2, const Tensor& gate_w,
                                       const Tensor& x, const SharedExpertActivations& a, const Tensor& dy,
                                       const Tensor& dh, const Tensor& dx, const Tensor& dfc2, const Tensor& dgate_w);
void moe_shared_expert_backward_input(const Context& ctx, const Tensor& fc1, const Tensor& x, const Tensor& dh,
                                      const Tensor& dx, const Tensor& dfc1);

}  // namespace troupe
