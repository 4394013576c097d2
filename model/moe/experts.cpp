#include "model/moe/experts.hpp"

#include <optional>
#include <utility>

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

void expect_expert_widths(bool swiglu, const Tensor& fc1, const Tensor& fc2) {
  TROUPE_CHECK(fc1.dim(1) == (swiglu ? 2 : 1) * fc2.dim(2), "moe_experts_forward: fc1 ", fc1.str(),
               " does not match fc2 ", fc2.str(), swiglu ? " with SwiGLU" : " with GELU");
}

// The routed experts with either kind of offsets (host or device).
template <typename Offsets>
void experts_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2, const Tensor& xp,
                     const Offsets& offsets, const MoeExpertActivations& a, const Tensor& yp) {
  grouped_linear_forward(ctx, xp, fc1, offsets, a.fc1);
  activation_forward(ctx, swiglu, a.fc1, a.act);
  grouped_linear_forward(ctx, a.act, fc2, offsets, yp);
}

}  // namespace

void moe_experts_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2, const Tensor& xp,
                         const std::vector<int64_t>& offsets, MoeExpertActivations& a, const Tensor& yp) {
  expect_expert_widths(swiglu, fc1, fc2);
  a.fc1 = Tensor::stream_ordered(ctx, xp.dtype(), {xp.dim(0), fc1.dim(1)});
  a.act = Tensor::stream_ordered(ctx, xp.dtype(), {xp.dim(0), fc2.dim(2)});
  experts_forward(ctx, swiglu, fc1, fc2, xp, offsets, a, yp);
}

void moe_experts_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2, const Tensor& xp,
                         const Tensor& offsets, const MoeExpertActivations& a, const Tensor& yp) {
  expect_expert_widths(swiglu, fc1, fc2);
  expect_shape("moe_experts_forward", "fc1 activations", a.fc1, {xp.dim(0), fc1.dim(1)});
  expect_shape("moe_experts_forward", "activations", a.act, {xp.dim(0), fc2.dim(2)});
  experts_forward(ctx, swiglu, fc1, fc2, xp, offsets, a, yp);
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

void moe_shared_expert_allocate(const Context& ctx, const Tensor& fc1, const Tensor& fc2, const Tensor& gate_w,
                                const Tensor& x, SharedExpertActivations& a) {
  const int64_t n = x.dim(0), c = x.dim(1);
  a.fc1 = Tensor::stream_ordered(ctx, x.dtype(), {n, fc1.dim(0)});
  a.act = Tensor::stream_ordered(ctx, x.dtype(), {n, fc2.dim(1)});
  a.out = Tensor::stream_ordered(ctx, x.dtype(), {n, c});
  a.gate = gate_w.defined() ? Tensor::stream_ordered(ctx, DType::f32, {n, 1}) : Tensor();
}

void moe_shared_expert_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2,
                               const Tensor& gate_w, const Tensor& x, SharedExpertActivations& a, const Tensor& y) {
  moe_shared_expert_allocate(ctx, fc1, fc2, gate_w, x, a);
  moe_shared_expert_forward(ctx, swiglu, fc1, fc2, gate_w, x, std::as_const(a), y);
}

void moe_shared_expert_forward(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& fc2,
                               const Tensor& gate_w, const Tensor& x, const SharedExpertActivations& a,
                               const Tensor& y) {
  moe_shared_expert_hidden(ctx, swiglu, fc1, x, a);
  moe_shared_expert_project(ctx, fc2, a);
  moe_shared_expert_add(ctx, gate_w, x, a, y);
}

void moe_shared_expert_hidden(const Context& ctx, bool swiglu, const Tensor& fc1, const Tensor& x,
                              const SharedExpertActivations& a) {
  linear_forward(ctx, x, fc1, Tensor(), a.fc1);
  activation_forward(ctx, swiglu, a.fc1, a.act);
}

void moe_shared_expert_project(const Context& ctx, const Tensor& fc2, const SharedExpertActivations& a) {
  linear_forward(ctx, a.act, fc2, Tensor(), a.out);
}

void moe_shared_expert_add(const Context& ctx, const Tensor& gate_w, const Tensor& x, const SharedExpertActivations& a,
                           const Tensor& y) {
  if (!gate_w.defined()) {
    add(ctx, y, a.out, y);
    return;
  }
  moe_shared_gate_forward(ctx, x, gate_w, a.out, a.gate, y);
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
