// The mixture-of-experts MLP block (Megatron-Core's MoELayer on one device): input [N, C] to
// output [N, C] = the routed experts' outputs weighted by the router's probs, plus the shared
// expert. The residual add stays outside, as for the dense MLP: a token every one of whose
// choices was dropped by the capacity gets 0 here (plus the shared expert), so the residual
// stream carries it past the layer unchanged (Megatron's token dropping).
//
//   MoeMlpSpec spec{cfg, /*hidden=*/C, /*expert_ffn=*/cfg.expert_ffn(F), /*swiglu=*/true};
//   MoeMlpParams p = moe_mlp_params(spec), g = moe_mlp_params(spec);   // zero host f32
//   MoeRouterState state = moe_router_state(cfg);
//   MoeMlpActivations a;
//   moe_mlp_forward(ctx, spec, p, state, x, T, /*training=*/true, a, y);
//   loss += a.stats.losses.total();
//   moe_mlp_backward(ctx, spec, p, a, x, dy, /*loss_grad_scale=*/1, dx, g);
//
// Expert parallelism: with an expert group of EP members (expert_parallel.hpp), p.fc1/fc2 (and
// g's) hold this member's E/EP experts [r*E/EP, (r+1)*E/EP) only; routing stays local (all E
// experts, this member's tokens: the capacity is of the local tokens, as Megatron's), the rows
// of each expert go to its member and the outputs come back. Every member of the group calls
// forward and backward together. Null: every expert here.
//
// Tensor parallelism (Megatron's expert-tensor-parallel size = TP): with a tensor group of TP
// members every member passes the same x, all N tokens of the group (gathered first under
// sequence parallelism), and routes them alike; each expert's fc1 holds this member's rows
// (with SwiGLU its part of both halves) and fc2 the matching columns, [E, F1/TP, C] and
// [E, C, F/TP], the shared expert likewise. y and dx are then this member's partial sums, to be
// all-reduced (or reduce-scattered) over the group by the caller, as the dense MLP's; backward
// all-reduces the probs' gradient so the router's weight gradient is whole on every member, and
// only member 0 adds the router's part of dx (every token counted once). The shared gate's
// weight gradient stays partial: the caller sums it over the group. Null: no tensor parallelism.
//
// With an expert group and a communication context (MoeComm::comm, a second stream on ctx's
// device) the dispatch and combine all-to-alls run on that stream: the counts' host
// synchronization then waits for that stream only, and ctx keeps the work queued on it. The
// same bits as on ctx. Overlap (Megatron's --moe-shared-expert-overlap; MoeComm::
// shared_expert_beside): ctx computes the shared expert beside them: forward, its fc1 and
// activation beside the dispatch and its fc2 beside the combine; backward, its gate, fc2 and
// activation beside the dispatch and its fc1 beside the combine. Forward gives the same bits as
// without; backward sums the shared expert's dx apart and adds it last (one more rounding in
// 16-bit types). MoeComm::spans marks the all-to-alls and the overlapped compute for the trace
// (kernels/stream_spans.hpp).
//
// Both backends run it. On CUDA, x and the expert weights are bf16, f16 or f32 (one type), the
// router weight and every gradient f32, the router state made by moe_router_state(ctx, cfg);
// the only device->host copy is the router's (router.hpp).
#pragma once

#include <cstdint>

#include "kernels/stream_spans.hpp"
#include "kernels/tensor.hpp"
#include "model/moe/dispatch_plan.hpp"
#include "model/moe/expert_parallel.hpp"
#include "model/moe/experts.hpp"
#include "model/moe/moe_config.hpp"
#include "model/moe/router.hpp"

namespace troupe {

struct MoeMlpSpec {
  MoeConfig moe;
  int hidden = 0;      // C
  int expert_ffn = 0;  // F of each routed expert (--moe-ffn-hidden-size)
  bool swiglu = false;
};

// Parameters (or their f32 gradients) of one MoE MLP.
struct MoeMlpParams {
  Tensor router;       // f32 [E, C]
  Tensor fc1;          // [E, F1, C]  (F1 = 2F with SwiGLU: rows [gate | up]); x's type
  Tensor fc2;          // [E, C, F]
  Tensor shared_fc1;   // [S1, C]; undefined without a shared expert
  Tensor shared_fc2;   // [C, S]
  Tensor shared_gate;  // [1, C], x's type; undefined without --moe-shared-expert-gate
};
// Zero-filled host f32 tensors of the spec's shapes.
MoeMlpParams moe_mlp_params(const MoeMlpSpec& spec);

// What the log reports per layer (Megatron's load_balancing_loss, z_loss, and the expert load),
// over the microbatch's every token (under context parallelism, the context group's).
struct MoeMlpStats {
  MoeRouterLosses losses;
  int64_t tokens_per_expert_max = 0;
  double tokens_per_expert_mean = 0;
  int64_t dropped = 0;  // (token, choice) pairs dropped by the capacity
};

struct MoeMlpActivations {
  MoeRouting routing;
  MoeDispatchPlan plan;
  Tensor xp;          // [R, C] tokens in expert order
  Tensor expert_out;  // [R, C]
  // Expert parallelism only: the exchange's counts and the rows this member's experts got.
  MoeExpertExchange exchange;
  Tensor xp_local;  // [exchange.local_rows(), C], in local expert order
  MoeExpertActivations experts;
  SharedExpertActivations shared;
  MoeMlpStats stats;
};

// Where an expert-parallel layer's all-to-alls run and what marks them (see above).
struct MoeComm {
  const Context* comm = nullptr;      // a second context on ctx's device, or null: the all-to-alls run on ctx
  StreamSpans* spans = nullptr;       // null: nothing marked
  bool shared_expert_beside = false;  // the shared expert computes beside the all-to-alls (with comm)
};

// Bytes of the tensors `a` holds (what a microbatch keeps for its backward).
size_t moe_mlp_activation_bytes(const MoeMlpActivations& a);

// x: [N, C] (N whole sequences of seq_length); y: [N, C] (overwritten). context_group: under
// context parallelism the group holding the other parts of x's sequences, over which the
// router's statistics and losses are taken (router.hpp); the backward needs none.
void moe_mlp_forward(const Context& ctx, const MoeMlpSpec& spec, const MoeMlpParams& p, MoeRouterState& state,
                     const Tensor& x, int64_t seq_length, bool training, MoeMlpActivations& a, const Tensor& y,
                     Collectives* expert_group = nullptr, Collectives* tensor_group = nullptr, const MoeComm& comm = {},
                     Collectives* context_group = nullptr);
// dy: [N, C]; dx: [N, C] (overwritten); g: f32 gradients, ACCUMULATE. loss_grad_scale: the
// factor on the main loss's gradient, applied to the router's losses (see router.hpp).
void moe_mlp_backward(const Context& ctx, const MoeMlpSpec& spec, const MoeMlpParams& p, const MoeMlpActivations& a,
                      const Tensor& x, const Tensor& dy, float loss_grad_scale, const Tensor& dx, const MoeMlpParams& g,
                      Collectives* expert_group = nullptr, Collectives* tensor_group = nullptr,
                      const MoeComm& comm = {});

}  // namespace troupe
