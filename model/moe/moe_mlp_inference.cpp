#include "model/moe/moe_mlp_inference.hpp"

#include <algorithm>

#include "base/check.hpp"
#include "kernels/moe_dispatch.hpp"
#include "kernels/moe_permute.hpp"

namespace troupe {

namespace {

// The first `n` rows of a [max, cols] buffer (undefined stays undefined).
Tensor rows(const Tensor& t, int64_t n) { return t.defined() ? t.slice(0, {n, t.dim(1)}) : Tensor(); }
// Rows [from, to) of a [rows, cols] tensor.
Tensor rows(const Tensor& t, int64_t from, int64_t to) { return t.slice(from * t.dim(1), {to - from, t.dim(1)}); }

// One chunk of at most b.max_tokens tokens.
void chunk_forward(const Context& ctx, const MoeMlpSpec& spec, const MoeMlpParams& p, const MoeRouterState& state,
                   const Tensor& x, const MoeInferenceBuffers& b, const Tensor& y) {
  const int64_t n = x.dim(0), r = n * spec.moe.moe_router_topk;
  const Tensor probs = rows(b.probs, n), experts = rows(b.experts, n);
  moe_router_route(ctx, spec.moe, p.router, state, x, rows(b.x32, n), rows(b.logits, n), probs, experts);
  // Dropless: every choice gets a row, R = N * K; only where each expert's rows begin is data.
  moe_expert_offsets(ctx, experts, b.offsets);
  const MoeRowMap row_map{b.row_choice.slice(0, {r}), rows(b.choice_row, n)};
  const Tensor xp = rows(b.xp, r), out = rows(b.expert_out, r);
  moe_row_map(ctx, experts, Tensor(), b.offsets, row_map);
  moe_permute_forward(ctx, x, row_map, xp);
  moe_experts_forward(ctx, spec.swiglu, p.fc1, p.fc2, xp, b.offsets, {rows(b.routed.fc1, r), rows(b.routed.act, r)},
                      out);
  moe_unpermute_forward(ctx, out, row_map, probs, y);
  if (spec.moe.has_shared_expert()) {
    const SharedExpertActivations shared{rows(b.shared.fc1, n), rows(b.shared.act, n), rows(b.shared.out, n),
                                         rows(b.shared.gate, n)};
    moe_shared_expert_forward(ctx, spec.swiglu, p.shared_fc1, p.shared_fc2, p.shared_gate, x, shared, y);
  }
}

}  // namespace

MoeInferenceBuffers moe_inference_buffers(const Context& ctx, const MoeMlpSpec& spec, int64_t max_tokens, DType dtype) {
  const MoeConfig& m = spec.moe;
  TROUPE_CHECK(m.enabled() && !m.drops_tokens(), "moe_inference_buffers: needs a dropless MoE config");
  TROUPE_CHECK(max_tokens > 0, "moe_inference_buffers: max_tokens must be positive, got ", max_tokens);
  const int64_t n = max_tokens, c = spec.hidden, e = m.num_experts, k = m.moe_router_topk, r = n * k;
  const int64_t f = spec.expert_ffn;
  auto empty = [&](DType t, Shape s) { return Tensor::empty(ctx, t, s); };
  MoeInferenceBuffers b;
  b.max_tokens = n;
  if (dtype != DType::f32) b.x32 = empty(DType::f32, {n, c});
  b.logits = empty(DType::f32, {n, e});
  b.probs = empty(DType::f32, {n, k});
  b.experts = empty(DType::i32, {n, k});
  b.offsets = empty(DType::i32, {e + 1});
  b.row_choice = empty(DType::i32, {r});
  b.choice_row = empty(DType::i32, {n, k});
  b.xp = empty(dtype, {r, c});
  b.expert_out = empty(dtype, {r, c});
  b.routed.fc1 = empty(dtype, {r, spec.swiglu ? 2 * f : f});
  b.routed.act = empty(dtype, {r, f});
  if (m.has_shared_expert()) {
    const int64_t s = m.moe_shared_expert_intermediate_size;
    b.shared.fc1 = empty(dtype, {n, spec.swiglu ? 2 * s : s});
    b.shared.act = empty(dtype, {n, s});
    b.shared.out = empty(dtype, {n, c});
    if (m.moe_shared_expert_gate) b.shared.gate = empty(DType::f32, {n, 1});
  }
  return b;
}

void moe_mlp_inference_forward(const Context& ctx, const MoeMlpSpec& spec, const MoeMlpParams& p,
                               const MoeRouterState& state, const Tensor& x, const MoeInferenceBuffers& b,
                               const Tensor& y) {
  constexpr const char* op = "moe_mlp_inference_forward";
  expect_shape(op, "x", x, {x.dim(0), spec.hidden});
  expect_shape(op, "y", y, x.shape());
  expect_dtype(op, "x", x, b.xp.dtype());
  // Each token's output depends on that token alone (dropless): chunks change no routing.
  for (int64_t from = 0; from < x.dim(0); from += b.max_tokens) {
    const int64_t to = std::min(x.dim(0), from + b.max_tokens);
    chunk_forward(ctx, spec, p, state, rows(x, from, to), b, rows(y, from, to));
  }
}

}  // namespace troupe
