// Hand-computed values on a tiny case: 4 tokens, 4 experts, top-2, the router the identity (so
// the logits are the inputs) and expert e = gelu((e + 1) x) (fc1 = (e + 1) I, fc2 = I):
//
//   token  logits            top-2 (softmax over the pair)
//   t0     [1.5, 1, 0, 0]    e0 s(0.5), e1 1 - s(0.5)        s = sigmoid
//   t1     [2, 0, 1, 0]      e0 s(1),   e2 1 - s(1)
//   t2     [0, 2, 0, 1]      e1 s(1),   e3 1 - s(1)
//   t3     [2, 0, 0, 1]      e0 s(1),   e3 1 - s(1)
//   tokens per expert: [3, 2, 1, 2]
//
// Capacity factor 1: capacity = ceil(4 * 2 / 4) = 2, so expert 0 drops one of t0, t1, t3:
// "probs" drops t0 (the lowest weight), "position" drops t3 (the last).
#include <cmath>

#include "tests/model/moe/moe_test_util.hpp"

namespace troupe::test {
namespace {

double sg(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double gelu(double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

const std::vector<float> kLogits = {1.5f, 1, 0, 0, 2, 0, 1, 0, 0, 2, 0, 1, 2, 0, 0, 1};

struct Tiny {
  MoeMlpSpec spec;
  MoeMlpParams p;
  MoeRouterState state;
  Tensor x = Tensor::host_f32({4, 4}, kLogits);
  Tensor y = Tensor::host(DType::f32, {4, 4});
  MoeMlpActivations a;

  explicit Tiny(const MoeConfig& m) : spec{m, 4, 4, /*swiglu=*/false}, p(moe_mlp_params(spec)) {
    spec.moe.validate(1);
    state = moe_router_state(spec.moe);
    for (int i = 0; i < 4; ++i) {
      p.router.at(i * 4 + i) = 1.0f;
      for (int e = 0; e < 4; ++e) {
        p.fc1.at(e * 16 + i * 4 + i) = float(e + 1);
        p.fc2.at(e * 16 + i * 4 + i) = 1.0f;
      }
    }
  }
  void forward(int64_t seq_length = 4) { moe_mlp_forward(cpu(), spec, p, state, x, seq_length, true, a, y); }
  // expert e's output for token t, by hand
  double expert(int e, int t, int col) const { return gelu(double(e + 1) * kLogits[size_t(t) * 4 + size_t(col)]); }
};

MoeConfig tiny_config() {
  MoeConfig m;
  m.num_experts = 4;
  m.moe_router_topk = 2;
  return m;
}

// softmax of logits row t, entry j
double softmax(int t, int j) {
  double z = 0;
  for (int i = 0; i < 4; ++i) z += std::exp(double(kLogits[size_t(t) * 4 + size_t(i)]));
  return std::exp(double(kLogits[size_t(t) * 4 + size_t(j)])) / z;
}

TEST(MoeHandValues, RouterPicksAndWeights) {
  Tiny m(tiny_config());
  m.forward();
  const std::vector<int> experts = {0, 1, 0, 2, 1, 3, 0, 3};
  const std::vector<double> probs = {sg(0.5), 1 - sg(0.5), sg(1), 1 - sg(1), sg(1), 1 - sg(1), sg(1), 1 - sg(1)};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(m.a.routing.experts.data_as<int32_t>()[i], experts[size_t(i)]) << i;
    EXPECT_NEAR(m.a.routing.probs.at(i), probs[size_t(i)], 1e-6) << i;
  }
  EXPECT_EQ(m.a.routing.tokens_per_expert, (std::vector<int64_t>{3, 2, 1, 2}));
  EXPECT_EQ(m.a.stats.tokens_per_expert_max, 3);
  EXPECT_DOUBLE_EQ(m.a.stats.tokens_per_expert_mean, 2.0);
  // y[t0] = s(0.5) e0(x0) + (1 - s(0.5)) e1(x0)
  for (int col = 0; col < 4; ++col)
    EXPECT_NEAR(m.y.at(col), sg(0.5) * m.expert(0, 0, col) + (1 - sg(0.5)) * m.expert(1, 0, col), 1e-6);
}

TEST(MoeHandValues, AuxLossSeqAuxLossAndZLoss) {
  MoeConfig c = tiny_config();
  c.moe_aux_loss_coeff = 0.1f;
  c.moe_z_loss_coeff = 0.01f;
  Tiny m(c);
  m.forward();
  // aux = E * coeff / (K * N^2) * sum_e (sum_t softmax[t, e]) * tokens_e
  const double tokens[4] = {3, 2, 1, 2};
  double weighted = 0;
  for (int t = 0; t < 4; ++t)
    for (int j = 0; j < 4; ++j) weighted += softmax(t, j) * tokens[j];
  EXPECT_NEAR(m.a.stats.losses.aux_loss, 4 * 0.1 / (2 * 16) * weighted, 1e-7);
  // z = coeff * mean_t logsumexp(l_t)^2
  double z = 0;
  for (int t = 0; t < 4; ++t) {
    double s = 0;
    for (int j = 0; j < 4; ++j) s += std::exp(double(kLogits[size_t(t) * 4 + size_t(j)]));
    z += std::log(s) * std::log(s);
  }
  EXPECT_NEAR(m.a.stats.losses.z_loss, 0.01 * z / 4, 1e-7);
  EXPECT_EQ(m.a.stats.losses.seq_aux_loss, 0.0);

  // Two sequences of 2: (t0, t1) send [2, 1, 1, 0] tokens to the experts, (t2, t3) [1, 1, 0, 2];
  // seq_aux = 1/B sum_b E * coeff / (K * T^2) * sum_e (sum_{t in b} softmax[t, e]) * tokens_{b, e}
  c.moe_router_load_balancing_type = MoeLoadBalancing::seq_aux_loss;
  Tiny s(c);
  s.forward(/*seq_length=*/2);
  const double seq_tokens[2][4] = {{2, 1, 1, 0}, {1, 1, 0, 2}};
  double seq_weighted = 0;
  for (int t = 0; t < 4; ++t)
    for (int j = 0; j < 4; ++j) seq_weighted += softmax(t, j) * seq_tokens[t / 2][j];
  EXPECT_NEAR(s.a.stats.losses.seq_aux_loss, 0.5 * 4 * 0.1 / (2 * 4) * seq_weighted, 1e-7);
  EXPECT_EQ(s.a.stats.losses.aux_loss, 0.0);
}

TEST(MoeHandValues, ExpertBiasUpdate) {
  MoeConfig c = tiny_config();
  c.moe_router_score_function = MoeScoreFunction::sigmoid;
  c.moe_router_enable_expert_bias = true;
  Tiny m(c);
  m.forward();
  for (int j = 0; j < 4; ++j) EXPECT_EQ(m.state.tokens_per_expert.at(j), (std::vector<float>{3, 2, 1, 2})[size_t(j)]);
  m.forward();  // a second microbatch of the same step adds to the counts
  EXPECT_EQ(m.state.tokens_per_expert.at(0), 6.0f);
  // mean 4: expert 0 (6) goes down, expert 2 (2) up, the others stay.
  moe_update_expert_bias(m.state, 0.01f);
  const std::vector<float> want = {-0.01f, 0.0f, 0.01f, 0.0f};
  for (int j = 0; j < 4; ++j) {
    EXPECT_FLOAT_EQ(m.state.expert_bias.at(j), want[size_t(j)]) << j;
    EXPECT_EQ(m.state.tokens_per_expert.at(j), 0.0f) << j;
  }
  // The bias now steers the choice: +1 on expert 2 makes it every token's first pick; the
  // weights stay sigmoid(logit) normalized over the picks.
  m.state.expert_bias.at(2) = 1.0f;
  m.forward();
  EXPECT_EQ(m.a.routing.experts.data_as<int32_t>()[0], 2);
  EXPECT_EQ(m.a.routing.experts.data_as<int32_t>()[1], 0);
  EXPECT_NEAR(m.a.routing.probs.at(0), sg(0) / (sg(0) + sg(1.5)), 1e-6);
}

TEST(MoeHandValues, CapacityDropsByProbs) {
  MoeConfig c = tiny_config();
  c.moe_expert_capacity_factor = 1.0;
  Tiny m(c);
  m.forward();
  EXPECT_EQ(m.a.routing.capacity, 2);
  EXPECT_EQ(m.a.stats.dropped, 1);
  EXPECT_EQ(m.a.routing.kept.data_as<uint8_t>()[0], 0);  // t0's choice of expert 0
  EXPECT_EQ(m.a.routing.probs.at(0), 0.0f);
  EXPECT_EQ(m.a.routing.tokens_per_expert, (std::vector<int64_t>{2, 2, 1, 2}));
  // The dropped choice adds nothing; the kept one keeps its weight (no renormalization).
  for (int col = 0; col < 4; ++col) EXPECT_NEAR(m.y.at(col), (1 - sg(0.5)) * m.expert(1, 0, col), 1e-6);
  // t3 keeps both.
  for (int col = 0; col < 4; ++col)
    EXPECT_NEAR(m.y.at(12 + col), sg(1) * m.expert(0, 3, col) + (1 - sg(1)) * m.expert(3, 3, col), 1e-6);
}

TEST(MoeHandValues, CapacityDropsByPosition) {
  MoeConfig c = tiny_config();
  c.moe_expert_capacity_factor = 1.0;
  c.moe_token_drop_policy = MoeTokenDropPolicy::position;
  Tiny m(c);
  m.forward();
  EXPECT_EQ(m.a.stats.dropped, 1);
  EXPECT_EQ(m.a.routing.kept.data_as<uint8_t>()[6], 0);  // t3's choice of expert 0
  for (int col = 0; col < 4; ++col) EXPECT_NEAR(m.y.at(12 + col), (1 - sg(1)) * m.expert(3, 3, col), 1e-6);
  for (int col = 0; col < 4; ++col)
    EXPECT_NEAR(m.y.at(col), sg(0.5) * m.expert(0, 0, col) + (1 - sg(0.5)) * m.expert(1, 0, col), 1e-6);
  // "Position" is Megatron's [T, B] order: with two sequences of 2 (rows t0 t1 | t2 t3), the
  // order is t0, t2, t1, t3, and t3 is still last.
  Tiny two(c);
  two.forward(/*seq_length=*/2);
  EXPECT_EQ(two.a.routing.kept.data_as<uint8_t>()[6], 0);
}

TEST(MoeHandValues, PaddingToCapacityKeepsTheValuesAndPadsRows) {
  MoeConfig c = tiny_config();
  c.moe_expert_capacity_factor = 1.0;
  Tiny dropped(c);
  dropped.forward();
  c.moe_pad_expert_input_to_capacity = true;
  Tiny padded(c);
  padded.forward();
  EXPECT_EQ(padded.a.plan.rows(), 4 * 2);  // every expert gets its capacity of rows
  EXPECT_LT(max_abs_diff(padded.y, dropped.y), 1e-6);
}

}  // namespace
}  // namespace troupe::test
