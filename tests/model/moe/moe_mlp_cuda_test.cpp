// The whole MoE MLP block on CUDA against the CPU backend, forward and backward: in f32 with a
// tight tolerance and the routing decisions (experts, kept choices, counts) bit-equal, and in
// bf16 within bf16's tolerance (the router stays f32, so its decisions still equal the CPU's on
// the same bf16-rounded inputs). Configurations: softmax top-2 (Mixtral-like), sigmoid with
// expert bias, scaling and a gated shared expert (DeepSeek/Qwen-like), capacity dropping by
// probs and by position (padded). A tie case makes top-k and the capacity drop choose between
// exactly equal scores, where only the tie rule decides.
#include <algorithm>
#include <cmath>
#include <functional>

#include "kernels/grouped_linear.hpp"
#include "kernels/moe_routing.hpp"
#include "tests/model/moe/moe_test_util.hpp"

namespace troupe::test {
namespace {

struct CudaCase {
  std::string name;
  MoeConfig moe;
  bool swiglu = true;
  DType dtype = DType::f32;
  bool integer_data = false;  // small integers: exact logits, many exact ties
};

void PrintTo(const CudaCase& c, std::ostream* os) { *os << c.name; }

// What a run produced, on the host in f32 (routing indices keep their integer types).
struct BlockResult {
  Tensor y, dx, logits, probs, experts, kept;
  MoeMlpParams grads;
  MoeMlpStats stats;
  std::vector<int64_t> tokens_per_expert;
  Tensor bias_counts;  // the router state's tokens_per_expert after the forward
  Tensor bias_after_update;
};

constexpr float kBiasRate = 0.01f;

Tensor host_copy(const Tensor& t) {
  if (!t.defined()) return Tensor();
  Tensor h = Tensor::host(t.dtype(), t.shape());
  std::copy(static_cast<const uint8_t*>(t.data()), static_cast<const uint8_t*>(t.data()) + t.nbytes(),
            static_cast<uint8_t*>(h.data()));
  return h;
}

MoeMlpParams map_params(const MoeMlpParams& p, const std::function<Tensor(const Tensor&, bool router)>& f) {
  auto g = [&](const Tensor& t, bool router) { return t.defined() ? f(t, router) : Tensor(); };
  return {g(p.router, true),      g(p.fc1, false),        g(p.fc2, false),
          g(p.shared_fc1, false), g(p.shared_fc2, false), g(p.shared_gate, false)};
}

BlockResult run_block(const Context& ctx, const MoeMlpSpec& spec, const MoeMlpParams& host_params,
                      const Tensor& host_bias, const Tensor& host_x, const Tensor& host_dy, int64_t seq, DType dtype) {
  const bool cuda = ctx.is_cuda();
  auto to_ctx = [&](const Tensor& t, DType d) { return cuda ? to_device(ctx, t, d) : host_copy(t); };
  const MoeMlpParams p =
      map_params(host_params, [&](const Tensor& t, bool router) { return to_ctx(t, router ? DType::f32 : dtype); });
  const MoeMlpParams g =
      map_params(host_params, [&](const Tensor& t, bool) { return Tensor::zeros(ctx, DType::f32, t.shape()); });
  MoeRouterState state = moe_router_state(ctx, spec.moe);
  if (state.expert_bias.defined()) copy(ctx, host_bias, state.expert_bias);
  const Tensor x = to_ctx(host_x, dtype), dy = to_ctx(host_dy, dtype);
  const int64_t n = x.dim(0), c = x.dim(1);
  Tensor y = Tensor::empty(ctx, dtype, {n, c}), dx = Tensor::empty(ctx, dtype, {n, c});
  MoeMlpActivations a;
  moe_mlp_forward(ctx, spec, p, state, x, seq, /*training=*/true, a, y);
  moe_mlp_backward(ctx, spec, p, a, x, dy, /*loss_grad_scale=*/0.5f, dx, g);

  BlockResult r;
  r.y = to_host_f32(ctx, y);
  r.dx = to_host_f32(ctx, dx);
  r.logits = to_host_f32(ctx, a.routing.logits);
  r.probs = to_host_f32(ctx, a.routing.probs);
  r.experts = to_host_f32(ctx, a.routing.experts);
  r.kept = to_host_f32(ctx, a.routing.kept);
  r.grads = map_params(g, [&](const Tensor& t, bool) { return to_host_f32(ctx, t); });
  r.stats = a.stats;
  r.tokens_per_expert = a.routing.tokens_per_expert;
  if (state.expert_bias.defined()) {
    r.bias_counts = to_host_f32(ctx, state.tokens_per_expert);
    moe_update_expert_bias(ctx, state, kBiasRate);
    r.bias_after_update = to_host_f32(ctx, state.expert_bias);
  }
  return r;
}

// Small integers: x in [-2, 2], router weights in [-1, 1], so every logit is an integer and
// both backends compute it exactly.
Tensor integer_tensor(Shape shape, uint64_t seed, int lo, int hi) {
  Tensor t = random_uniform(shape, seed, float(lo), float(hi) + 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.at(i) = std::floor(t.at(i));
  return t;
}

// Rows whose k-th and (k+1)-th largest selection scores are equal: where top-k needs its tie rule.
int64_t rows_tied_at_topk(const MoeConfig& m, const Tensor& logits, const Tensor& bias) {
  const int64_t n = logits.dim(0), e = logits.dim(1), k = m.moe_router_topk;
  int64_t tied = 0;
  for (int64_t row = 0; row < n; ++row) {
    std::vector<float> s(static_cast<size_t>(e));
    for (int64_t j = 0; j < e; ++j) {
      const float l = logits.at(row * e + j);
      s[size_t(j)] = m.moe_router_score_function == MoeScoreFunction::sigmoid
                         ? 1.0f / (1.0f + std::exp(-l)) + (bias.defined() ? bias.at(j) : 0.0f)
                         : l;
    }
    std::sort(s.begin(), s.end(), std::greater<>());
    if (k < e && s[size_t(k - 1)] == s[size_t(k)]) ++tied;
  }
  return tied;
}

// Experts with a kept and a dropped choice of exactly equal probs: where the capacity drop
// needs its tie rule (the earlier token in Megatron's order).
int64_t ties_at_capacity(const BlockResult& r, const Tensor& probs_before_drop) {
  int64_t tied = 0;
  const int64_t choices = r.experts.numel();
  for (int64_t i = 0; i < choices; ++i) {
    if (r.kept.data_as<uint8_t>()[i]) continue;
    for (int64_t j = 0; j < choices; ++j)
      if (r.kept.data_as<uint8_t>()[j] && r.experts.data_as<int32_t>()[j] == r.experts.data_as<int32_t>()[i] &&
          probs_before_drop.at(j) == probs_before_drop.at(i)) {
        ++tied;
        break;
      }
  }
  return tied;
}

void expect_same_routing(const BlockResult& gpu_r, const BlockResult& cpu_r) {
  for (int64_t i = 0; i < cpu_r.experts.numel(); ++i) {
    ASSERT_EQ(gpu_r.experts.data_as<int32_t>()[i], cpu_r.experts.data_as<int32_t>()[i]) << "choice " << i;
    ASSERT_EQ(gpu_r.kept.data_as<uint8_t>()[i], cpu_r.kept.data_as<uint8_t>()[i]) << "choice " << i;
  }
  EXPECT_EQ(gpu_r.tokens_per_expert, cpu_r.tokens_per_expert);
  EXPECT_EQ(gpu_r.stats.dropped, cpu_r.stats.dropped);
  EXPECT_EQ(gpu_r.stats.tokens_per_expert_max, cpu_r.stats.tokens_per_expert_max);
  EXPECT_DOUBLE_EQ(gpu_r.stats.tokens_per_expert_mean, cpu_r.stats.tokens_per_expert_mean);
}

void expect_loss_near(const char* name, double got, double want) {
  EXPECT_NEAR(got, want, 1e-5 * std::max(1e-3, std::fabs(want))) << name;
}

class MoeMlpCuda : public ::testing::TestWithParam<CudaCase> {};

TEST_P(MoeMlpCuda, MatchesCpu) {
  const CudaCase& cc = GetParam();
  const MoeMlpSpec spec{cc.moe, /*hidden=*/64, /*expert_ffn=*/48, cc.swiglu};
  spec.moe.validate(1);
  const int64_t seq = 32, n = 4 * seq, e = spec.moe.num_experts;
  MoeMlpParams p = random_moe_params(spec, 500, 0.15f);
  Tensor x = random_normal({n, spec.hidden}, 21), dy = random_normal({n, spec.hidden}, 22, 0.5f);
  Tensor bias = random_normal({e}, 23, 0.05f);
  if (cc.integer_data) {
    x = integer_tensor({n, spec.hidden}, 31, -2, 2);
    p.router = integer_tensor({e, spec.hidden}, 32, -1, 1);
    for (int64_t j = 0; j < e; ++j) bias.at(j) = 0.25f * float(j % 2);  // exact: keeps equal scores equal
  }
  if (cc.dtype != DType::f32) {  // the CPU reference runs on the values the GPU holds
    x = round_through(x, cc.dtype);
    dy = round_through(dy, cc.dtype);
    p = map_params(p, [&](const Tensor& t, bool router) { return router ? t : round_through(t, cc.dtype); });
  }

  const BlockResult want = run_block(cpu(), spec, p, bias, x, dy, seq, DType::f32);
  const BlockResult got = run_block(gpu(), spec, p, bias, x, dy, seq, cc.dtype);

  if (cc.integer_data) {  // the case must exercise both tie rules
    EXPECT_GT(rows_tied_at_topk(spec.moe, want.logits, spec.moe.moe_router_enable_expert_bias ? bias : Tensor()), 0);
    if (spec.moe.drops_tokens()) {
      // probs before the drop: the kept ones are unchanged; rerun top-k on the CPU for the rest
      Tensor probs = Tensor::host(DType::f32, {n, spec.moe.moe_router_topk});
      Tensor experts = Tensor::host(DType::i32, {n, spec.moe.moe_router_topk});
      moe_topk_forward(cpu(), want.logits, spec.moe.moe_router_enable_expert_bias ? bias : Tensor(), spec.moe.topk(),
                       probs, experts);
      EXPECT_GT(ties_at_capacity(want, probs), 0);
    }
  }
  if (spec.moe.drops_tokens()) {
    EXPECT_GT(want.stats.dropped, 0) << "the case should drop tokens";
  }
  expect_same_routing(got, want);

  const bool f32 = cc.dtype == DType::f32;
  const double out_tol = f32 ? 2e-5 : 2e-2, grad_tol = f32 ? 2e-5 : 3e-2;
  EXPECT_LT(rel_error(got.logits, want.logits), f32 ? 1e-6 : 1e-5);
  EXPECT_LT(rel_error(got.probs, want.probs), 1e-5);
  expect_loss_near("aux_loss", got.stats.losses.aux_loss, want.stats.losses.aux_loss);
  expect_loss_near("seq_aux_loss", got.stats.losses.seq_aux_loss, want.stats.losses.seq_aux_loss);
  expect_loss_near("z_loss", got.stats.losses.z_loss, want.stats.losses.z_loss);
  EXPECT_LT(rel_error(got.y, want.y), out_tol);
  EXPECT_LT(rel_error(got.dx, want.dx), grad_tol);
  EXPECT_LT(rel_error(got.grads.router, want.grads.router), grad_tol);
  EXPECT_LT(rel_error(got.grads.fc1, want.grads.fc1), grad_tol);
  EXPECT_LT(rel_error(got.grads.fc2, want.grads.fc2), grad_tol);
  if (spec.moe.has_shared_expert()) {
    EXPECT_LT(rel_error(got.grads.shared_fc1, want.grads.shared_fc1), grad_tol);
    EXPECT_LT(rel_error(got.grads.shared_fc2, want.grads.shared_fc2), grad_tol);
  }
  if (spec.moe.moe_shared_expert_gate) {
    EXPECT_LT(rel_error(got.grads.shared_gate, want.grads.shared_gate), grad_tol);
  }
  if (spec.moe.moe_router_enable_expert_bias) {
    EXPECT_EQ(max_abs_diff(got.bias_counts, want.bias_counts), 0.0);
    EXPECT_EQ(max_abs_diff(got.bias_after_update, want.bias_after_update), 0.0);
  }
}

MoeConfig mixtral() {
  MoeConfig c;
  c.num_experts = 8;
  c.moe_router_topk = 2;
  c.moe_aux_loss_coeff = 1e-2f;
  c.moe_z_loss_coeff = 1e-3f;
  return c;
}

MoeConfig deepseek() {
  MoeConfig c;
  c.num_experts = 16;
  c.moe_router_topk = 6;
  c.moe_router_score_function = MoeScoreFunction::sigmoid;
  c.moe_router_enable_expert_bias = true;
  c.moe_router_topk_scaling_factor = 2.5f;
  c.moe_router_load_balancing_type = MoeLoadBalancing::seq_aux_loss;
  c.moe_aux_loss_coeff = 1e-3f;
  c.moe_shared_expert_intermediate_size = 40;
  c.moe_shared_expert_gate = true;
  return c;
}

MoeConfig capacity_by_probs() {
  MoeConfig c = mixtral();
  c.moe_expert_capacity_factor = 1.0;
  return c;
}

MoeConfig capacity_by_position_padded() {
  MoeConfig c = mixtral();
  c.moe_router_topk = 3;
  c.moe_router_pre_softmax = true;
  c.moe_expert_capacity_factor = 0.9;
  c.moe_pad_expert_input_to_capacity = true;
  c.moe_token_drop_policy = MoeTokenDropPolicy::position;
  c.moe_shared_expert_intermediate_size = 32;
  return c;
}

MoeConfig sigmoid_ties() {  // top-1: a prob is sigmoid(logit), so equal logits give equal probs
  MoeConfig c;
  c.num_experts = 8;
  c.moe_router_topk = 1;
  c.moe_router_score_function = MoeScoreFunction::sigmoid;
  c.moe_router_enable_expert_bias = true;
  c.moe_expert_capacity_factor = 1.0;
  c.moe_aux_loss_coeff = 1e-2f;
  return c;
}

std::vector<CudaCase> cases() {
  std::vector<CudaCase> out;
  for (DType d : {DType::f32, DType::bf16}) {
    const std::string suffix = d == DType::f32 ? "_f32" : "_bf16";
    out.push_back({"mixtral_softmax_top2" + suffix, mixtral(), true, d});
    out.push_back({"deepseek_sigmoid_bias_shared" + suffix, deepseek(), true, d});
    out.push_back({"capacity_by_probs" + suffix, capacity_by_probs(), true, d});
    out.push_back({"capacity_by_position_padded_gelu" + suffix, capacity_by_position_padded(), false, d});
  }
  out.push_back({"ties_softmax_top2_capacity_f32", capacity_by_probs(), true, DType::f32, true});
  out.push_back({"ties_sigmoid_bias_capacity_f32", sigmoid_ties(), true, DType::f32, true});
  out.push_back({"ties_softmax_top2_capacity_bf16", capacity_by_probs(), true, DType::bf16, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, MoeMlpCuda, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The grouped linear alone on shapes with empty experts and an unaligned width (the per-group
// fallback), against the CPU loop.
TEST(GroupedLinearCuda, MatchesCpuWithEmptyGroupsAndOddWidths) {
  for (int64_t k : {64, 33}) {
    for (DType d : {DType::f32, DType::bf16}) {
      const std::vector<int64_t> offsets = {0, 5, 5, 37, 37, 60};
      const int64_t r = offsets.back(), groups = int64_t(offsets.size()) - 1, nout = 40;
      Tensor x = round_through(random_normal({r, k}, 41), d),
             w = round_through(random_normal({groups, nout, k}, 42), d);
      Tensor dy = round_through(random_normal({r, nout}, 43), d);
      Tensor y = Tensor::host(DType::f32, {r, nout}), dx = Tensor::host(DType::f32, {r, k});
      Tensor dw = random_normal({groups, nout, k}, 44);  // accumulates onto this
      Tensor dw_gpu = to_device(gpu(), dw, DType::f32);
      grouped_linear_forward(cpu(), x, w, offsets, y);
      grouped_linear_backward(cpu(), dy, x, w, offsets, dx, dw);
      const Tensor xd = to_device(gpu(), x, d), wd = to_device(gpu(), w, d), dyd = to_device(gpu(), dy, d);
      Tensor yd = Tensor::empty(gpu(), d, {r, nout}), dxd = Tensor::empty(gpu(), d, {r, k});
      grouped_linear_forward(gpu(), xd, wd, offsets, yd);
      grouped_linear_backward(gpu(), dyd, xd, wd, offsets, dxd, dw_gpu);
      const double tol = d == DType::f32 ? 1e-5 : 1e-2;
      EXPECT_LT(rel_error(to_host_f32(gpu(), yd), y), tol) << "k " << k << " " << dtype_name(d);
      EXPECT_LT(rel_error(to_host_f32(gpu(), dxd), dx), tol) << "k " << k << " " << dtype_name(d);
      EXPECT_LT(rel_error(to_host_f32(gpu(), dw_gpu), dw), d == DType::f32 ? 1e-5 : 1e-3)
          << "k " << k << " " << dtype_name(d);
    }
  }
}

}  // namespace
}  // namespace troupe::test
