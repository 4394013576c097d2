// A dropless MoE MLP equals the naive computation: every token through its top-k experts one at
// a time (plain loops, in double), weighted as Megatron / HF weight them, plus the shared expert.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/model/moe/moe_test_util.hpp"

namespace troupe::test {
namespace {

using Vec = std::vector<double>;

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double gelu(double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

// out = act(W1 x) then W2 · that: W1 [F1, C] at w1, W2 [C, F] at w2.
Vec mlp(const float* w1, const float* w2, int64_t c, int64_t f, bool swiglu, const Vec& x) {
  const int64_t f1 = swiglu ? 2 * f : f;
  Vec h(static_cast<size_t>(f1), 0.0), a(static_cast<size_t>(f), 0.0), out(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < f1; ++i)
    for (int64_t j = 0; j < c; ++j) h[size_t(i)] += double(w1[i * c + j]) * x[size_t(j)];
  for (int64_t i = 0; i < f; ++i)
    a[size_t(i)] = swiglu ? h[size_t(i)] * sigmoid(h[size_t(i)]) * h[size_t(f + i)] : gelu(h[size_t(i)]);
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < f; ++j) out[size_t(i)] += double(w2[i * f + j]) * a[size_t(j)];
  return out;
}

// The experts token n goes to and their weights, straight from the formulas.
std::vector<std::pair<int, double>> naive_route(const MoeConfig& m, const Vec& logits, const float* bias) {
  const int e = m.num_experts, k = m.moe_router_topk;
  Vec score(static_cast<size_t>(e)), select(static_cast<size_t>(e));
  const double mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (double l : logits) z += std::exp(l - mx);
  for (int j = 0; j < e; ++j) {
    if (m.moe_router_score_function == MoeScoreFunction::sigmoid) {
      score[size_t(j)] = sigmoid(logits[size_t(j)]);
      select[size_t(j)] = score[size_t(j)] + (bias ? bias[j] : 0.0);
    } else {
      score[size_t(j)] = std::exp(logits[size_t(j)] - mx) / z;
      select[size_t(j)] = score[size_t(j)];
    }
  }
  std::vector<int> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return select[size_t(a)] > select[size_t(b)]; });
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += score[size_t(order[size_t(i)])];
  std::vector<std::pair<int, double>> out;
  for (int i = 0; i < k; ++i) {
    const int j = order[size_t(i)];
    double w = score[size_t(j)];
    const bool renormalize = m.moe_router_score_function == MoeScoreFunction::sigmoid
                                 ? k > 1
                                 : !m.moe_router_pre_softmax;  // Mixtral / Qwen3 norm_topk_prob
    if (renormalize) w /= sum;
    if (m.moe_router_topk_scaling_factor > 0) w *= m.moe_router_topk_scaling_factor;
    out.emplace_back(j, w);
  }
  return out;
}

struct RefCase {
  std::string name;
  MoeConfig moe;
  bool swiglu;
};

void PrintTo(const RefCase& c, std::ostream* os) { *os << c.name; }

class MoeMlpDenseReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(MoeMlpDenseReference, EqualsTokenByTokenExperts) {
  const MoeMlpSpec spec{GetParam().moe, /*hidden=*/16, /*expert_ffn=*/12, GetParam().swiglu};
  spec.moe.validate(1);
  const int64_t n = 20, c = spec.hidden, f = spec.expert_ffn, e = spec.moe.num_experts;
  const MoeMlpParams p = random_moe_params(spec, 300);
  MoeRouterState state = moe_router_state(spec.moe);
  if (state.expert_bias.defined())
    for (int64_t j = 0; j < e; ++j) state.expert_bias.at(j) = 0.2f * float(j % 4) - 0.3f;
  Tensor x = random_normal({n, c}, 9);
  Tensor y = Tensor::host(DType::f32, {n, c});
  MoeMlpActivations a;
  moe_mlp_forward(cpu(), spec, p, state, x, /*seq_length=*/n / 2, /*training=*/false, a, y);

  Tensor want = Tensor::host(DType::f32, {n, c});
  const int64_t f1 = spec.swiglu ? 2 * f : f;
  for (int64_t t = 0; t < n; ++t) {
    const Vec xt(x.data_as<float>() + t * c, x.data_as<float>() + (t + 1) * c);
    Vec logits(static_cast<size_t>(e), 0.0);
    for (int64_t j = 0; j < e; ++j)
      for (int64_t i = 0; i < c; ++i) logits[size_t(j)] += double(p.router.at(j * c + i)) * xt[size_t(i)];
    Vec out(static_cast<size_t>(c), 0.0);
    for (auto [j, w] :
         naive_route(spec.moe, logits, state.expert_bias.defined() ? state.expert_bias.data_as<float>() : nullptr)) {
      const Vec o = mlp(p.fc1.data_as<float>() + j * f1 * c, p.fc2.data_as<float>() + j * c * f, c, f, spec.swiglu, xt);
      for (int64_t i = 0; i < c; ++i) out[size_t(i)] += w * o[size_t(i)];
    }
    if (spec.moe.has_shared_expert()) {
      const int64_t s = spec.moe.moe_shared_expert_intermediate_size;
      const Vec o = mlp(p.shared_fc1.data_as<float>(), p.shared_fc2.data_as<float>(), c, s, spec.swiglu, xt);
      double gate = 1.0;
      if (p.shared_gate.defined()) {
        double l = 0;
        for (int64_t i = 0; i < c; ++i) l += double(p.shared_gate.at(i)) * xt[size_t(i)];
        gate = sigmoid(l);
      }
      for (int64_t i = 0; i < c; ++i) out[size_t(i)] += gate * o[size_t(i)];
    }
    for (int64_t i = 0; i < c; ++i) want.at(t * c + i) = float(out[size_t(i)]);
  }
  EXPECT_LT(rel_error(y, want), 1e-5);
  EXPECT_EQ(a.stats.dropped, 0);
  EXPECT_DOUBLE_EQ(a.stats.tokens_per_expert_mean, double(n * spec.moe.moe_router_topk) / double(e));
}

std::vector<RefCase> ref_cases() {
  std::vector<RefCase> out;
  MoeConfig mixtral;  // softmax over the picks (HF Mixtral, Qwen3-MoE norm_topk_prob)
  mixtral.num_experts = 8;
  mixtral.moe_router_topk = 2;
  out.push_back({"mixtral", mixtral, true});
  MoeConfig qwen2 = mixtral;  // softmax first, no renormalization, gated shared expert (HF Qwen2-MoE)
  qwen2.moe_router_topk = 4;
  qwen2.moe_router_pre_softmax = true;
  qwen2.moe_shared_expert_intermediate_size = 20;
  qwen2.moe_shared_expert_gate = true;
  out.push_back({"qwen2_moe", qwen2, true});
  MoeConfig deepseek = mixtral;  // sigmoid, biased choice, scaled weights, shared expert
  deepseek.moe_router_topk = 3;
  deepseek.moe_router_score_function = MoeScoreFunction::sigmoid;
  deepseek.moe_router_enable_expert_bias = true;
  deepseek.moe_router_topk_scaling_factor = 2.5f;
  deepseek.moe_shared_expert_intermediate_size = 24;
  out.push_back({"deepseek", deepseek, true});
  MoeConfig gelu = mixtral;
  gelu.moe_router_topk = 1;
  gelu.moe_router_pre_softmax = true;
  out.push_back({"gelu_top1", gelu, false});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, MoeMlpDenseReference, ::testing::ValuesIn(ref_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace troupe::test
