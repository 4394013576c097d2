#include "model/moe/router.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "base/check.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/linear.hpp"
#include "kernels/moe_dispatch.hpp"
#include "kernels/moe_router_losses.hpp"
#include "kernels/moe_routing.hpp"
#include "model/moe/scratch_tensor.hpp"

namespace troupe {

namespace {

// Slots of the f32 scalars a forward brings to the host in one copy: this rank's kept counts,
// then what the statistics report (under context parallelism summed over the group in one
// all-reduce): the group's kept counts and the losses.
struct ScalarSlots {
  int64_t experts;
  int64_t stats() const { return experts; }  // counts occupy [0, E); the group's [E, 2E)
  int64_t aux() const { return 2 * experts; }
  int64_t seq_aux() const { return 2 * experts + 1; }
  int64_t z() const { return 2 * experts + 2; }
  int64_t size() const { return 2 * experts + 3; }
};

Tensor slot(const Tensor& scalars, int64_t at, int64_t len = 1) { return scalars.slice(at, {len}); }

// x in f32: itself; a 16-bit x converted to f32 (exact) into x32, a temporary the caller keeps
// while it uses the result; see "Router precision" in router.hpp.
const Tensor& router_input_f32(const Context& ctx, const Tensor& x, std::optional<ScratchTensor>& x32) {
  if (x.dtype() == DType::f32) return x;
  x32.emplace(ctx, DType::f32, x.shape());
  convert(ctx, x, *x32);
  return x32->tensor();
}

// logits f32 [N, E] = x · w^T in f32; x32: f32 [N, C] for a 16-bit x to be converted into.
void router_logits_forward(const Context& ctx, const Tensor& x, const Tensor& x32, const Tensor& w,
                           const Tensor& logits) {
  if (x.dtype() != DType::f32) convert(ctx, x, x32);
  linear_forward(ctx, x.dtype() == DType::f32 ? x : x32, w, Tensor(), logits);
}

// The same with the f32 copy a stream-ordered temporary.
void router_logits_forward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& logits) {
  std::optional<ScratchTensor> x32;
  if (x.dtype() != DType::f32) x32.emplace(ctx, DType::f32, x.shape());
  router_logits_forward(ctx, x, x32 ? x32->tensor() : Tensor(), w, logits);
}

// dx += dlogits · w;  dw += dlogits^T · x, all in f32; a 16-bit dx gets the f32 product
// rounded to its type, then added (two roundings where an f32 epilogue would take one: well
// inside bf16's tolerance, and it keeps to the existing ops).
void router_logits_backward(const Context& ctx, const Tensor& dlogits, const Tensor& x, const Tensor& w,
                            const Tensor& dx, const Tensor& dw) {
  if (x.dtype() == DType::f32) {
    linear_backward(ctx, dlogits, x, w, dx, dw, Tensor(), /*accumulate_dx=*/true);
    return;
  }
  const ScratchTensor dx32(ctx, DType::f32, dx.shape());
  std::optional<ScratchTensor> x32;
  linear_backward(ctx, dlogits, router_input_f32(ctx, x, x32), w, dx32, dw, Tensor());
  const ScratchTensor part(ctx, dx.dtype(), dx.shape());
  convert(ctx, dx32, part);
  add(ctx, dx, part, dx);
}

void expect_state_on(const Context& ctx, const char* op, const Tensor& t, const char* name) {
  TROUPE_CHECK(t.defined() && t.is_cuda() == ctx.is_cuda(), op, ": the router state's ", name, " is ",
               t.defined() ? (t.is_cuda() ? "on a GPU" : "on the host") : "missing",
               "; make the state with moe_router_state(ctx, cfg) for the router's device");
}

}  // namespace

MoeRouterState moe_router_state(const MoeConfig& cfg) {
  MoeRouterState s;
  if (cfg.moe_router_enable_expert_bias) {
    s.expert_bias = Tensor::host_f32({cfg.num_experts}, std::vector<float>(size_t(cfg.num_experts), 0.0f));
    s.tokens_per_expert = Tensor::host_f32({cfg.num_experts}, std::vector<float>(size_t(cfg.num_experts), 0.0f));
  }
  return s;
}

std::string moe_expert_bias_name(int global_layer) {
  return "decoder.layers." + std::to_string(global_layer) + ".mlp.router.expert_bias";
}

MoeRouterState moe_router_state(const Context& ctx, const MoeConfig& cfg) {
  if (!ctx.is_cuda()) return moe_router_state(cfg);
  MoeRouterState s;
  if (cfg.moe_router_enable_expert_bias) {
    s.expert_bias = Tensor::zeros(ctx, DType::f32, {cfg.num_experts});
    s.tokens_per_expert = Tensor::zeros(ctx, DType::f32, {cfg.num_experts});
  }
  return s;
}

void moe_router_forward(const Context& ctx, const MoeConfig& cfg, const Tensor& w, MoeRouterState& state,
                        const Tensor& x, int64_t seq_length, bool training, MoeRouting& r, Collectives* context_group) {
  constexpr const char* op = "moe_router_forward";
  const int64_t n = x.dim(0), e = cfg.num_experts, k = cfg.moe_router_topk;
  expect_shape(op, "w", w, {e, x.dim(1)});
  expect_dtype(op, "w", w, DType::f32);
  TROUPE_CHECK(seq_length > 0 && n % seq_length == 0, op, ": ", n, " token rows are not whole sequences of ",
               seq_length);
  if (cfg.moe_router_enable_expert_bias) {
    expect_state_on(ctx, op, state.expert_bias, "expert_bias");
    expect_state_on(ctx, op, state.tokens_per_expert, "tokens_per_expert");
  }
  const int context = context_group != nullptr ? context_group->size() : 1;
  cfg.validate_context_parallel(context);
  r = MoeRouting{};
  r.tokens = n;
  r.seq_length = seq_length;
  r.training = training;
  r.context_size = context;
  r.logits = Tensor::stream_ordered(ctx, DType::f32, {n, e});
  r.probs = Tensor::stream_ordered(ctx, DType::f32, {n, k});
  r.experts = Tensor::stream_ordered(ctx, DType::i32, {n, k});
  r.kept = Tensor::stream_ordered(ctx, DType::u8, {n, k});
  router_logits_forward(ctx, x, w, r.logits);
  moe_topk_forward(ctx, r.logits, cfg.moe_router_enable_expert_bias ? state.expert_bias : Tensor(), cfg.topk(), r.probs,
                   r.experts);
  if (cfg.drops_tokens()) r.capacity = moe_expert_capacity(n * k, cfg.num_experts, cfg.moe_expert_capacity_factor);
  moe_capacity_drop(ctx, r.experts, r.probs, cfg.num_experts, seq_length, r.capacity,
                    cfg.moe_token_drop_policy == MoeTokenDropPolicy::probs, r.kept);

  // Everything the host needs from this forward, gathered for one device->host copy.
  const ScalarSlots slots{e};
  const Tensor scalars = Tensor::stream_ordered(ctx, DType::f32, {slots.size()});
  fill_zero(ctx, scalars);
  const Tensor counts = slot(scalars, 0, e);
  moe_expert_counts(ctx, r.experts, r.kept, counts);
  if (training && cfg.load_balancing_coeff() > 0) {
    const bool per_sequence = cfg.moe_router_load_balancing_type == MoeLoadBalancing::seq_aux_loss;
    const int64_t group_tokens = per_sequence ? seq_length : n;
    r.balance_tokens_per_expert = Tensor::stream_ordered(ctx, DType::f32, {n / group_tokens, e});
    moe_balance_counts(ctx, r.logits, cfg.moe_router_score_function, int(k), group_tokens, r.balance_tokens_per_expert);
    // Row b of the counts is sequence b (or the microbatch) on every context rank.
    if (context_group != nullptr) context_group->all_reduce(ctx, r.balance_tokens_per_expert);
    moe_balance_loss_forward(ctx, r.logits, r.balance_tokens_per_expert, cfg.moe_router_score_function, int(k),
                             group_tokens * context, cfg.moe_aux_loss_coeff,
                             slot(scalars, per_sequence ? slots.seq_aux() : slots.aux()));
  }
  if (training && cfg.moe_z_loss_coeff > 0)
    moe_z_loss_forward(ctx, r.logits, cfg.moe_z_loss_coeff, n * context, slot(scalars, slots.z()));
  if (training && cfg.moe_router_enable_expert_bias) {
    // Megatron counts its routing map after dropping; padded to capacity, that map is the
    // capacity mask (every expert gets the same count, so the bias does not move).
    if (cfg.moe_pad_expert_input_to_capacity) {
      Tensor pad = Tensor::host_f32({e}, std::vector<float>(size_t(e), float(std::min(r.capacity, n))));
      Tensor pad_dev = Tensor::stream_ordered(ctx, DType::f32, {e});
      copy(ctx, pad, pad_dev);
      add(ctx, state.tokens_per_expert, pad_dev, state.tokens_per_expert);
    } else {
      add(ctx, state.tokens_per_expert, counts, state.tokens_per_expert);
    }
  }
  if (context_group != nullptr) {
    copy(ctx, counts, slot(scalars, slots.stats(), e));
    context_group->all_reduce(ctx, scalars.slice(slots.stats(), {slots.size() - slots.stats()}));
  }

  const Tensor host = to_host_f32(ctx, scalars);  // the one device->host copy (synchronizes)
  const float* h = host.data_as<float>();
  r.tokens_per_expert.assign(size_t(e), 0);
  int64_t kept_total = 0;
  for (int64_t j = 0; j < e; ++j) kept_total += (r.tokens_per_expert[size_t(j)] = int64_t(h[j]));
  r.dropped = n * k - kept_total;
  r.context_tokens_per_expert = r.tokens_per_expert;
  if (context_group != nullptr)
    for (int64_t j = 0; j < e; ++j) r.context_tokens_per_expert[size_t(j)] = int64_t(h[slots.stats() + j]);
  r.expert_rows = cfg.moe_pad_expert_input_to_capacity ? std::vector<int64_t>(size_t(e), std::min(r.capacity, n))
                                                       : r.tokens_per_expert;
  r.losses.aux_loss = h[slots.aux()];
  r.losses.seq_aux_loss = h[slots.seq_aux()];
  r.losses.z_loss = h[slots.z()];
}

void moe_router_route(const Context& ctx, const MoeConfig& cfg, const Tensor& w, const MoeRouterState& state,
                      const Tensor& x, const Tensor& x32, const Tensor& logits, const Tensor& probs,
                      const Tensor& experts) {
  constexpr const char* op = "moe_router_route";
  const int64_t n = x.dim(0), e = cfg.num_experts;
  TROUPE_CHECK(!cfg.drops_tokens(), op, ": routing with --moe-expert-capacity-factor ", cfg.moe_expert_capacity_factor,
               " is not dropless; use moe_router_forward");
  expect_shape(op, "w", w, {e, x.dim(1)});
  expect_dtype(op, "w", w, DType::f32);
  expect_shape(op, "logits", logits, {n, e});
  if (cfg.moe_router_enable_expert_bias) expect_state_on(ctx, op, state.expert_bias, "expert_bias");
  if (x.dtype() != DType::f32) expect_shape(op, "x32", x32, x.shape());  // see "Router precision" in router.hpp
  router_logits_forward(ctx, x, x32, w, logits);
  moe_topk_forward(ctx, logits, cfg.moe_router_enable_expert_bias ? state.expert_bias : Tensor(), cfg.topk(), probs,
                   experts);
}

void moe_router_backward(const Context& ctx, const MoeConfig& cfg, const Tensor& w, const Tensor& x,
                         const MoeRouting& r, const Tensor& dprobs, float loss_grad_scale, const Tensor& dx,
                         const Tensor& dw) {
  TROUPE_CHECK(r.training, "moe_router_backward: the routing comes from a forward without training");
  const int64_t n = r.tokens, e = cfg.num_experts;
  const ScratchTensor dlogits(ctx, DType::f32, {n, e});  // stream-ordered: no device synchronization
  fill_zero(ctx, dlogits);
  moe_topk_backward(ctx, r.logits, r.experts, dprobs, cfg.topk(), dlogits);
  // The whole microbatch's losses on these rows (router.hpp: context parallelism).
  if (cfg.load_balancing_coeff() > 0) {
    const int64_t group_rows = n / r.balance_tokens_per_expert.dim(0);
    moe_balance_loss_backward(ctx, r.logits, r.balance_tokens_per_expert, cfg.moe_router_score_function,
                              cfg.moe_router_topk, group_rows * r.context_size,
                              cfg.moe_aux_loss_coeff * loss_grad_scale, dlogits);
  }
  if (cfg.moe_z_loss_coeff > 0)
    moe_z_loss_backward(ctx, r.logits, cfg.moe_z_loss_coeff * loss_grad_scale, n * r.context_size, dlogits);
  router_logits_backward(ctx, dlogits, x, w, dx, dw);
}

std::vector<float> moe_updated_expert_bias(const std::vector<float>& tokens_per_expert,
                                           const std::vector<float>& expert_bias, float rate) {
  TROUPE_CHECK(tokens_per_expert.size() == expert_bias.size() && !expert_bias.empty(),
               "moe_updated_expert_bias: ", tokens_per_expert.size(), " token counts for ", expert_bias.size(),
               " expert biases");
  float total = 0.0f;
  for (float t : tokens_per_expert) total += t;
  const float mean = total / float(tokens_per_expert.size());
  std::vector<float> out(expert_bias);
  for (size_t j = 0; j < out.size(); ++j) {
    const float offset = mean - tokens_per_expert[j];
    out[j] += rate * float((offset > 0) - (offset < 0));
  }
  return out;
}

void moe_update_expert_bias(const Context& ctx, MoeRouterState& state, float rate) {
  TROUPE_CHECK(state.expert_bias.defined(), "moe_update_expert_bias: the router has no expert bias");
  expect_state_on(ctx, "moe_update_expert_bias", state.expert_bias, "expert_bias");
  const int64_t e = state.expert_bias.numel();
  const Tensor bias = to_host_f32(ctx, state.expert_bias), counts = to_host_f32(ctx, state.tokens_per_expert);
  const float* b = bias.data_as<float>();
  const float* c = counts.data_as<float>();
  const std::vector<float> updated =
      moe_updated_expert_bias(std::vector<float>(c, c + e), std::vector<float>(b, b + e), rate);
  copy(ctx, Tensor::host_f32({e}, updated), state.expert_bias);
  fill_zero(ctx, state.tokens_per_expert);
  ctx.synchronize();  // the host source of the copy goes out of scope here
}

void moe_update_expert_bias(MoeRouterState& state, float rate) { moe_update_expert_bias(Context::cpu(), state, rate); }

}  // namespace troupe
