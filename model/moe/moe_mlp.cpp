#include "model/moe/moe_mlp.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "base/check.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/stream_fence.hpp"
#include "model/moe/scratch_tensor.hpp"

namespace troupe {

namespace {

// Where an expert-parallel layer's all-to-alls run: on MoeComm::comm (on), else on ctx; and
// whether the shared expert computes beside them (beside). to_comm / from_comm order the two
// streams (nothing when off).
struct Overlap {
  Overlap(const Context& ctx, const MoeComm& c, bool shared)
      : on(c.comm != nullptr && ctx.is_cuda()),
        beside(on && shared && c.shared_expert_beside),
        ctx(ctx),
        comm(on ? *c.comm : ctx) {
    TROUPE_CHECK(!on || (comm.kind() == ctx.kind() && comm.device_index() == ctx.device_index()),
                 "moe_mlp: the communication context must be on the compute context's device");
  }
  void to_comm() const {
    if (on) fence_wait(comm, fence_record(ctx));
  }
  void from_comm() const {
    if (on) fence_wait(ctx, fence_record(comm));
  }
  bool on, beside;
  const Context& ctx;
  const Context& comm;
};

}  // namespace

MoeMlpParams moe_mlp_params(const MoeMlpSpec& spec) {
  const MoeConfig& m = spec.moe;
  const int64_t e = m.num_experts, c = spec.hidden, f = spec.expert_ffn, f1 = spec.swiglu ? 2 * f : f;
  auto zeros = [](Shape s) { return Tensor::host_f32(s, std::vector<float>(size_t(shape_numel(s)), 0.0f)); };
  MoeMlpParams p;
  p.router = zeros({e, c});
  p.fc1 = zeros({e, f1, c});
  p.fc2 = zeros({e, c, f});
  if (m.has_shared_expert()) {
    const int64_t s = m.moe_shared_expert_intermediate_size;
    p.shared_fc1 = zeros({spec.swiglu ? 2 * s : s, c});
    p.shared_fc2 = zeros({c, s});
    if (m.moe_shared_expert_gate) p.shared_gate = zeros({1, c});
  }
  return p;
}

size_t moe_mlp_activation_bytes(const MoeMlpActivations& a) {
  size_t n = 0;
  for (const Tensor* t :
       {&a.routing.logits, &a.routing.probs, &a.routing.experts, &a.routing.kept, &a.routing.balance_tokens_per_expert,
        &a.plan.map.row_choice, &a.plan.map.choice_row, &a.xp, &a.expert_out, &a.xp_local, &a.experts.fc1,
        &a.experts.act, &a.shared.fc1, &a.shared.act, &a.shared.out, &a.shared.gate})
    if (t->defined()) n += t->nbytes();
  return n;
}

void moe_mlp_forward(const Context& ctx, const MoeMlpSpec& spec, const MoeMlpParams& p, MoeRouterState& state,
                     const Tensor& x, int64_t seq_length, bool training, MoeMlpActivations& a, const Tensor& y,
                     Collectives* expert_group, Collectives* tensor_group, const MoeComm& comm,
                     Collectives* context_group) {
  constexpr const char* op = "moe_mlp_forward";
  TROUPE_CHECK(spec.moe.enabled(), op, ": --num-experts is not set");
  expect_shape(op, "x", x, {x.dim(0), spec.hidden});
  expect_shape(op, "y", y, x.shape());
  const int64_t e = spec.moe.num_experts, ep = expert_group != nullptr ? expert_group->size() : 1;
  const int64_t tp = tensor_group != nullptr ? tensor_group->size() : 1, f = spec.expert_ffn / tp;
  TROUPE_CHECK(e % ep == 0, op, ": ", e, " experts do not split over an expert group of ", ep);
  TROUPE_CHECK(spec.expert_ffn % tp == 0, op, ": the experts' width ", spec.expert_ffn,
               " does not split over a tensor group of ", tp);
  expect_shape(op, "fc1", p.fc1, {e / ep, spec.swiglu ? 2 * f : f, spec.hidden});
  expect_shape(op, "fc2", p.fc2, {e / ep, spec.hidden, f});

  moe_router_forward(ctx, spec.moe, p.router, state, x, seq_length, training, a.routing, context_group);
  a.plan = moe_dispatch_plan(ctx, a.routing, spec.moe.num_experts);
  const int64_t rows = a.plan.rows();
  a.xp = Tensor::stream_ordered(ctx, x.dtype(), {rows, spec.hidden});
  a.expert_out = Tensor::stream_ordered(ctx, x.dtype(), {rows, spec.hidden});
  moe_permute_forward(ctx, x, a.plan.map, a.xp);
  const bool shared = spec.moe.has_shared_expert();
  bool shared_beside = false;  // the shared expert's fc1 and fc2 ran beside the all-to-alls
  if (expert_group == nullptr) {
    moe_experts_forward(ctx, spec.swiglu, p.fc1, p.fc2, a.xp, a.plan.expert_offsets, a.experts, a.expert_out);
  } else {
    const Overlap o(ctx, comm, shared);
    o.to_comm();  // after the permute
    if (o.beside) {
      StreamSpanScope span(comm.spans, ctx, SpanKind::moe_overlap);
      moe_shared_expert_allocate(ctx, p.shared_fc1, p.shared_fc2, p.shared_gate, x, a.shared);
      moe_shared_expert_hidden(ctx, spec.swiglu, p.shared_fc1, x, a.shared);
    }
    {
      StreamSpanScope span(comm.spans, o.comm, SpanKind::moe_dispatch);
      a.exchange = moe_expert_exchange(o.comm, *expert_group, a.plan.expert_offsets);
      a.xp_local = Tensor::stream_ordered(ctx, x.dtype(), {a.exchange.local_rows(), spec.hidden});
      moe_expert_dispatch(o.comm, *expert_group, a.exchange, a.xp, a.xp_local);
    }
    o.from_comm();
    const ScratchTensor out_local(ctx, x.dtype(), {a.exchange.local_rows(), spec.hidden});
    moe_experts_forward(ctx, spec.swiglu, p.fc1, p.fc2, a.xp_local, a.exchange.local_offsets, a.experts, out_local);
    o.to_comm();
    if (o.beside) {
      StreamSpanScope span(comm.spans, ctx, SpanKind::moe_overlap);
      moe_shared_expert_project(ctx, p.shared_fc2, a.shared);
    }
    {
      StreamSpanScope span(comm.spans, o.comm, SpanKind::moe_combine);
      moe_expert_combine(o.comm, *expert_group, a.exchange, out_local, a.expert_out);
    }
    o.from_comm();  // before out_local is released on ctx
    shared_beside = o.beside;
  }
  moe_unpermute_forward(ctx, a.expert_out, a.plan.map, a.routing.probs, y);
  if (shared) {
    if (shared_beside)
      moe_shared_expert_add(ctx, p.shared_gate, x, a.shared, y);
    else
      moe_shared_expert_forward(ctx, spec.swiglu, p.shared_fc1, p.shared_fc2, p.shared_gate, x, a.shared, y);
  }

  const std::vector<int64_t>& tokens = a.routing.context_tokens_per_expert;
  a.stats.losses = a.routing.losses;
  a.stats.tokens_per_expert_max = *std::max_element(tokens.begin(), tokens.end());
  a.stats.tokens_per_expert_mean = double(std::accumulate(tokens.begin(), tokens.end(), int64_t(0))) / double(e);
  a.stats.dropped = a.routing.dropped;
}

void moe_mlp_backward(const Context& ctx, const MoeMlpSpec& spec, const MoeMlpParams& p, const MoeMlpActivations& a,
                      const Tensor& x, const Tensor& dy, float loss_grad_scale, const Tensor& dx, const MoeMlpParams& g,
                      Collectives* expert_group, Collectives* tensor_group, const MoeComm& comm) {
  constexpr const char* op = "moe_mlp_backward";
  expect_shape(op, "dy", dy, x.shape());
  expect_shape(op, "dx", dx, x.shape());
  const int64_t n = x.dim(0), k = spec.moe.moe_router_topk, rows = a.plan.rows();
  // The backward's temporaries are stream-ordered (scratch_tensor.hpp): no device synchronization.
  const ScratchTensor dexpert_out(ctx, x.dtype(), {rows, spec.hidden});
  const ScratchTensor dprobs(ctx, DType::f32, {n, k});
  moe_unpermute_backward(ctx, dy, a.expert_out, a.plan.map, a.routing.probs, dexpert_out, dprobs);
  // Under tensor parallelism expert_out is this member's partial sum, so dprobs is too.
  if (tensor_group != nullptr) tensor_group->all_reduce(ctx, dprobs);
  const ScratchTensor dxp(ctx, x.dtype(), {rows, spec.hidden});
  const bool shared = spec.moe.has_shared_expert();
  // With the overlap the shared expert's part of dx is summed here first, added last.
  std::optional<ScratchTensor> dx_shared;
  if (expert_group == nullptr) {
    moe_experts_backward(ctx, spec.swiglu, p.fc1, p.fc2, a.xp, a.plan.expert_offsets, a.experts, dexpert_out, dxp,
                         g.fc1, g.fc2);
  } else {
    // The output gradient's rows go where the rows went; the input gradient's come back.
    const Overlap o(ctx, comm, shared);
    const int64_t local_rows = a.exchange.local_rows();
    const ScratchTensor dout_local(ctx, x.dtype(), {local_rows, spec.hidden});
    const ScratchTensor dxp_local(ctx, x.dtype(), {local_rows, spec.hidden});
    std::optional<ScratchTensor> dh;
    o.to_comm();  // after the unpermute's backward
    if (o.beside) {
      StreamSpanScope span(comm.spans, ctx, SpanKind::moe_overlap);
      dx_shared.emplace(ctx, x.dtype(), x.shape());
      dh.emplace(ctx, x.dtype(), a.shared.fc1.shape());
      fill_zero(ctx, *dx_shared);
      moe_shared_expert_backward_output(ctx, spec.swiglu, p.shared_fc2, p.shared_gate, x, a.shared, dy, *dh, *dx_shared,
                                        g.shared_fc2, g.shared_gate);
    }
    {
      StreamSpanScope span(comm.spans, o.comm, SpanKind::moe_dispatch);
      moe_expert_dispatch(o.comm, *expert_group, a.exchange, dexpert_out, dout_local);
    }
    o.from_comm();
    moe_experts_backward(ctx, spec.swiglu, p.fc1, p.fc2, a.xp_local, a.exchange.local_offsets, a.experts, dout_local,
                         dxp_local, g.fc1, g.fc2);
    o.to_comm();
    if (o.beside) {
      StreamSpanScope span(comm.spans, ctx, SpanKind::moe_overlap);
      moe_shared_expert_backward_input(ctx, p.shared_fc1, x, *dh, *dx_shared, g.shared_fc1);
    }
    {
      StreamSpanScope span(comm.spans, o.comm, SpanKind::moe_combine);
      moe_expert_combine(o.comm, *expert_group, a.exchange, dxp_local, dxp);
    }
    o.from_comm();  // before the scratch tensors are released on ctx
  }
  moe_permute_backward(ctx, dxp, a.plan.map, dx);
  if (tensor_group == nullptr || tensor_group->rank() == 0) {
    moe_router_backward(ctx, spec.moe, p.router, x, a.routing, dprobs, loss_grad_scale, dx, g.router);
  } else {  // the router's weight gradient, whole; its part of dx is member 0's
    const ScratchTensor unused_dx(ctx, x.dtype(), x.shape());
    fill_zero(ctx, unused_dx);
    moe_router_backward(ctx, spec.moe, p.router, x, a.routing, dprobs, loss_grad_scale, unused_dx, g.router);
  }
  if (dx_shared)
    add(ctx, dx, *dx_shared, dx);
  else if (shared)
    moe_shared_expert_backward(ctx, spec.swiglu, p.shared_fc1, p.shared_fc2, p.shared_gate, x, a.shared, dy, dx,
                               g.shared_fc1, g.shared_fc2, g.shared_gate);
}

}  // namespace troupe
