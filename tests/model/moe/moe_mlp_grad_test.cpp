// The whole MoE MLP against finite differences: d(objective)/d(every parameter and the input),
// objective = <R, y> + the router's losses, for softmax and sigmoid routers, pre-softmax,
// load-balancing and z-losses, capacity dropping (also padded) and the shared expert.
#include <cmath>

#include "tests/model/moe/moe_test_util.hpp"

namespace troupe::test {
namespace {

struct GradCase {
  std::string name;
  MoeConfig moe;
  bool swiglu = true;
};

void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

class MoeMlpGrad : public ::testing::TestWithParam<GradCase> {};

TEST_P(MoeMlpGrad, MatchesFiniteDifferences) {
  const GradCase& gc = GetParam();
  const MoeMlpSpec spec{gc.moe, /*hidden=*/8, /*expert_ffn=*/6, gc.swiglu};
  spec.moe.validate(1);
  const int64_t seq = 6, n = 2 * seq;
  MoeMlpParams p = random_moe_params(spec, 100);
  MoeMlpParams g = moe_mlp_params(spec);
  MoeRouterState state = moe_router_state(spec.moe);
  if (state.expert_bias.defined())
    for (int64_t j = 0; j < state.expert_bias.numel(); ++j) state.expert_bias.at(j) = 0.05f * float(j % 3);
  Tensor x = random_normal({n, spec.hidden}, 7), proj = random_normal({n, spec.hidden}, 8);
  Tensor y = Tensor::host(DType::f32, {n, spec.hidden}), dx = Tensor::host(DType::f32, {n, spec.hidden});

  MoeMlpActivations a;
  moe_mlp_forward(cpu(), spec, p, state, x, seq, /*training=*/true, a, y);
  const Tensor experts = a.routing.experts, kept = a.routing.kept;
  moe_mlp_backward(cpu(), spec, p, a, x, proj, /*loss_grad_scale=*/1.0f, dx, g);
  if (spec.moe.drops_tokens()) {
    EXPECT_GT(a.stats.dropped, 0) << "the case should drop tokens";
  }

  auto objective = [&] {
    MoeMlpActivations b;
    moe_mlp_forward(cpu(), spec, p, state, x, seq, true, b, y);
    for (int64_t i = 0; i < experts.numel(); ++i)  // a probe must not change the routing
      if (b.routing.experts.data_as<int32_t>()[i] != experts.data_as<int32_t>()[i] ||
          b.routing.kept.data_as<uint8_t>()[i] != kept.data_as<uint8_t>()[i])
        return 1e9;
    return dot(y, proj) + b.stats.losses.total();
  };
  expect_grad_close("x", objective, x, dx, 24, 1e-2f);
  expect_grad_close("router", objective, p.router, g.router, 24, 1e-2f);
  expect_grad_close("fc1", objective, p.fc1, g.fc1, 24, 1e-2f);
  expect_grad_close("fc2", objective, p.fc2, g.fc2, 24, 1e-2f);
  if (spec.moe.has_shared_expert()) {
    expect_grad_close("shared_fc1", objective, p.shared_fc1, g.shared_fc1, 16, 1e-2f);
    expect_grad_close("shared_fc2", objective, p.shared_fc2, g.shared_fc2, 16, 1e-2f);
  }
  if (spec.moe.moe_shared_expert_gate)
    expect_grad_close("shared_gate", objective, p.shared_gate, g.shared_gate, 8, 1e-2f);

  // The router's own losses alone (R = 0), where they are on: their gradient reaches the router.
  if (a.stats.losses.total() > 0) {
    MoeMlpParams g0 = moe_mlp_params(spec);
    Tensor zero = Tensor::host_f32({n, spec.hidden}, std::vector<float>(size_t(n * spec.hidden), 0.0f));
    moe_mlp_backward(cpu(), spec, p, a, x, zero, 1.0f, dx, g0);
    auto losses_only = [&] {
      MoeMlpActivations b;
      moe_mlp_forward(cpu(), spec, p, state, x, seq, true, b, y);
      return b.stats.losses.total();
    };
    double norm = 0;
    for (int64_t i = 0; i < g0.router.numel(); ++i) norm += std::fabs(g0.router.at(i));
    EXPECT_GT(norm, 0.0);
    expect_grad_close("router (losses only)", losses_only, p.router, g0.router, 24, 1e-2f, 2e-2, 1e-5);
  }
}

MoeConfig base(MoeScoreFunction fn, int topk = 2) {
  MoeConfig c;
  c.num_experts = 4;
  c.moe_router_topk = topk;
  c.moe_router_score_function = fn;
  return c;
}

std::vector<GradCase> cases() {
  std::vector<GradCase> out;
  {
    MoeConfig c = base(MoeScoreFunction::softmax);
    c.moe_aux_loss_coeff = 0.1f;
    c.moe_z_loss_coeff = 0.01f;
    out.push_back({"softmax_aux_z_swiglu", c, true});
  }
  {
    MoeConfig c = base(MoeScoreFunction::softmax, 3);
    c.moe_router_pre_softmax = true;
    c.moe_router_topk_scaling_factor = 2.0f;
    c.moe_router_load_balancing_type = MoeLoadBalancing::seq_aux_loss;
    c.moe_aux_loss_coeff = 0.1f;
    out.push_back({"presoftmax_seqaux_scaled_gelu", c, false});
  }
  {
    MoeConfig c = base(MoeScoreFunction::sigmoid);
    c.moe_router_enable_expert_bias = true;
    c.moe_router_topk_scaling_factor = 2.5f;
    c.moe_router_load_balancing_type = MoeLoadBalancing::seq_aux_loss;
    c.moe_aux_loss_coeff = 0.1f;
    c.moe_shared_expert_intermediate_size = 5;
    c.moe_shared_expert_gate = true;
    out.push_back({"sigmoid_bias_shared_gate", c, true});
  }
  {
    MoeConfig c = base(MoeScoreFunction::softmax);
    c.moe_expert_capacity_factor = 1.0;
    c.moe_aux_loss_coeff = 0.1f;
    c.moe_shared_expert_intermediate_size = 5;
    out.push_back({"softmax_capacity_probs_shared", c, true});
  }
  {
    MoeConfig c = base(MoeScoreFunction::sigmoid, 1);
    c.moe_expert_capacity_factor = 1.0;
    c.moe_pad_expert_input_to_capacity = true;
    c.moe_token_drop_policy = MoeTokenDropPolicy::position;
    c.moe_z_loss_coeff = 0.01f;
    out.push_back({"sigmoid_top1_capacity_position_padded", c, false});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, MoeMlpGrad, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace troupe::test
