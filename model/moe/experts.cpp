#include "model/moe/experts.hpp"

#include <optional>

#include "base/check.hpp"
#include "kernels/activation.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/grouped_linear.hpp"
#include "kernels/linear.hpp"
#include "kernels/moe_shared_gate.hpp"
#include "model/moe/scratch_tensor.hpp"

namespace troupe {

namespace {

void activation_forward(const Context& ctx, bool swiglu, const Tensor& h, const Tensor& a) {
  if (swiglu)
    swiglu_forward(ctx, h, a);
  else
    gelu_forward(ctx, h, a);
}

void activation_backward(const Context& ctx, bool swiglu, const Tensor& da, const Tensor& h, const Tensor& dh) {
  if (swiglu)
    swiglu_backward(ctx, da, h, dh);
  else
    gelu_backward(ctx, da, h, dh);
}

}  // namespace

void moe_experts_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2, const Tensor& xp,
                         const std::vector<int64_t>& offsets, MoeExpertActivations& a, const Tensor& yp) {
  const int64_t rows = xp.dim(0), f1 = fc1.dim(1), f = fc2.dim(2);
  TROUPE_CHECK(f1 == (swiglu ? 2 * f : f), "moe_experts_forward: fc1 ", fc1.str(), " does not match fc2 ", fc2.str(),
               swiglu ? " with SwiGLU" : " with GELU");
  a.fc1 = Tensor::stream_ordered(ctx, xp.dtype(), {rows, f1});
  a.act = Tensor::stream_ordered(ctx, xp.dtype(), {rows, f});
  grouped_linear_forward(ctx, xp, fc1, offsets, a.fc1);
  activation_forward(ctx, swiglu, a.fc1, a.act);
  grouped_linear_forward(ctx, a.act, fc2, offsets, yp);
}

void moe_experts_backward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2, const Tensor& xp,
                          const std::vector<int64_t>& offsets, const MoeExpertActivations& a, const Tensor& dyp,
                          const Tensor& dxp, const Tensor& dfc1, const Tensor& dfc2) {
  const ScratchTensor dact(ctx, xp.dtype(), a.act.shape());
  const ScratchTensor dh(ctx, xp.dtype(), a.fc1.shape());
  grouped_linear_backward(ctx, dyp, a.act, fc2, offsets, dact, dfc2);
  activation_backward(ctx, swiglu, dact, a.fc1, dh);
  grouped_linear_backward(ctx, dh, xp, fc1, offsets, dxp, dfc1);
}

void moe_shared_expert_hidden(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& x,
                              SharedExpertActivations& a) {
  const int64_t n = x.dim(0);
  const int64_t s = swiglu ? fc1.dim(0) / 2 : fc1.dim(0);
  a.fc1 = Tensor::stream_ordered(ctx, x.dtype(), {n, fc1.dim(0)});
  a.act = Tensor::stream_ordered(ctx, x.dtype(), {n, s});
  linear_forward(ctx, x, fc1, Tensor(), a.fc1);
  activation_forward(ctx, swiglu, a.fc1, a.act);
}

void moe_shared_expert_project(const Context& ctx, const Tensor& fc2, SharedExpertActivations& a) {
  TROUPE_CHECK(a.act.defined() && fc2.dim(1) == a.act.dim(1), "moe_shared_expert_project: fc2 ", fc2.str(),
               " does not match the hidden activation ", a.act.str());
  a.out = Tensor::stream_ordered(ctx, a.act.dtype(), {a.act.dim(0), fc2.dim(0)});
  linear_forward(ctx, a.act, fc2, Tensor(), a.out);
}

void moe_shared_expert_add(const Context& ctx, const Tensor& gate_w, const Tensor& x, SharedExpertActivations& a,
                           const Tensor& y) {
  if (!gate_w.defined()) {
    add(ctx, y, a.out, y);
    return;
  }
  a.gate = Tensor::stream_ordered(ctx, DType::f32, {x.dim(0), 1});
  moe_shared_gate_forward(ctx, x, gate_w, a.out, a.gate, y);
}

void moe_shared_expert_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2,
                               const Tensor& gate_w, const Tensor& x, SharedExpertActivations& a, const Tensor& y) {
  moe_shared_expert_hidden(ctx, swiglu, fc1, x, a);
  moe_shared_expert_project(ctx, fc2, a);
  moe_shared_expert_add(ctx, gate_w, x, a, y);
}

void moe_shared_expert_backward_output(const Context& ctx, bool swiglu, const Tensor& fc2, const Tensor& gate_w,
                                       const Tensor& x, const SharedExpertActivations& a, const Tensor& dy,
                                       const Tensor& dh, const Tensor& dx, const Tensor& dfc2, const Tensor& dgate_w) {
  std::optional<ScratchTensor> gated_dout;  // the gate's output gradient; without a gate, dy itself
  if (gate_w.defined()) {
    gated_dout.emplace(ctx, x.dtype(), x.shape());
    moe_shared_gate_backward(ctx, x, gate_w, a.gate, a.out, dy, *gated_dout, dx, dgate_w);
  }
  const Tensor& dout = gated_dout ? gated_dout->tensor() : dy;
  const ScratchTensor dact(ctx, x.dtype(), a.act.shape());
  linear_backward(ctx, dout, a.act, fc2, dact, dfc2, Tensor());
  activation_backward(ctx, swiglu, dact, a.fc1, dh);
}

void moe_shared_expert_backward_input(const Context& ctx, const Tensor& fc1, const Tensor& x, const Tensor& dh,
                                      const Tensor& dx, const Tensor& dfc1) {
  linear_backward(ctx, dh, x, fc1, dx, dfc1, Tensor(), /*accumulate_dx=*/true);
}

void moe_shared_expert_backward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2,
                                const Tensor& gate_w, const Tensor& x, const SharedExpertActivations& a,
                                const Tensor& dy, const Tensor& dx, const Tensor& dfc1, const Tensor& dfc2,
                                const Tensor& dgate_w) {
  const ScratchTensor dh(ctx, x.dtype(), a.fc1.shape());
  moe_shared_expert_backward_output(ctx, swiglu, fc2, gate_w, x, a, dy, dh, dx, dfc2, dgate_w);
  moe_shared_expert_backward_input(ctx, fc1, x, dh, dx, dfc1);
}

}  // namespace troupe
