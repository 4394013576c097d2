// The MoE MLP under context parallelism (model/moe/router.hpp): C members of an in-process
// context group (CPU devices on threads), each holding its two chunks of every sequence
// (model/context_parallel.hpp), reproduce the one-device MLP on the whole sequences: every
// member's output and input gradient rows equal the whole MLP's at their global positions, the
// parameter gradients summed over the members equal the whole MLP's (the router's losses are
// the whole microbatch's, each member differentiating them on its rows), and every member
// reports the whole microbatch's losses and expert load. aux_loss, seq_aux_loss (a sequence's
// counts summed over its pieces) and the z-loss, softmax and sigmoid scores, CP2 and CP4.
// Capacity dropping is refused by flag name.
#include <mutex>

#include "actors/fabric/collective_groups.hpp"
#include "kernels/elementwise.hpp"
#include "model/context_parallel.hpp"
#include "tests/model/context_rows.hpp"
#include "tests/model/moe/moe_test_util.hpp"

namespace troupe::test {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16, kHidden = 8;

struct Case {
  const char* name;
  int C;
  MoeLoadBalancing balance;
  MoeScoreFunction fn;
  bool shared = false;
};

MoeMlpSpec spec_of(const Case& c) {
  MoeConfig m;
  m.num_experts = 8;
  m.moe_router_topk = 2;
  m.moe_router_score_function = c.fn;
  m.moe_router_load_balancing_type = c.balance;
  m.moe_aux_loss_coeff = 0.1f;
  m.moe_z_loss_coeff = 0.01f;
  if (c.shared) m.moe_shared_expert_intermediate_size = 6;
  MoeMlpSpec spec{m, kHidden, /*expert_ffn=*/6, /*swiglu=*/true};
  spec.moe.validate(1);
  return spec;
}

// The gradients and statistics of one forward and backward.
struct Result {
  Tensor y, dx;  // [B * T, C] in global token order
  MoeMlpParams g;
  MoeMlpStats stats;
};

// loss_grad_scale 0.5: the router's losses enter the gradients with the main loss's weight.
constexpr float kScale = 0.5f;

Result run_whole(const MoeMlpSpec& spec, const MoeMlpParams& p, const Tensor& x, const Tensor& dy) {
  Result r{Tensor::host(DType::f32, x.shape()), Tensor::host(DType::f32, x.shape()), moe_mlp_params(spec), {}};
  MoeRouterState state = moe_router_state(spec.moe);
  MoeMlpActivations a;
  moe_mlp_forward(cpu(), spec, p, state, x, kSeq, /*training=*/true, a, r.y);
  moe_mlp_backward(cpu(), spec, p, a, x, dy, kScale, r.dx, r.g);
  r.stats = a.stats;
  return r;
}

// Every member's stats (they must all be the whole microbatch's), and the rest gathered: rows
// to their global positions, gradients summed.
struct Gathered {
  Result sum;
  std::vector<MoeMlpStats> stats;
};

void add_into(const Tensor& into, const Tensor& t) {
  if (t.defined()) add(cpu(), into, t, into);
}

Gathered run_context_parallel(const MoeMlpSpec& spec, const MoeMlpParams& p, const Tensor& x, const Tensor& dy, int C) {
  const int64_t local = kSeq / C;
  Gathered out{{Tensor::host(DType::f32, x.shape()), Tensor::host(DType::f32, x.shape()), moe_mlp_params(spec), {}},
               std::vector<MoeMlpStats>(size_t(C))};
  std::vector<std::unique_ptr<Collectives>> group = actors::make_cpu_group(C, {"cp", std::chrono::seconds(60)});
  std::mutex mu;
  run_threads(C, [&](int k) {
    try {
      const ContextParallel cp{k, C, group[size_t(k)].get()};
      const Tensor xs = context_rows(cp, x.view({kBatch, kSeq, kHidden}), local, false).view({kBatch * local, kHidden});
      const Tensor dys =
          context_rows(cp, dy.view({kBatch, kSeq, kHidden}), local, false).view({kBatch * local, kHidden});
      const Tensor y = Tensor::host(DType::f32, xs.shape()), dx = Tensor::host(DType::f32, xs.shape());
      MoeMlpParams g = moe_mlp_params(spec);
      MoeRouterState state = moe_router_state(spec.moe);
      MoeMlpActivations a;
      moe_mlp_forward(cpu(), spec, p, state, xs, local, true, a, y, nullptr, nullptr, {}, cp.comm);
      moe_mlp_backward(cpu(), spec, p, a, xs, dys, kScale, dx, g);
      std::lock_guard lock(mu);
      out.stats[size_t(k)] = a.stats;
      for (int64_t b = 0; b < kBatch; ++b)
        for (int64_t t = 0; t < local; ++t) {
          const int64_t to = b * kSeq + context_position(cp, local, t), from = b * local + t;
          std::copy_n(y.data_as<float>() + from * kHidden, kHidden, out.sum.y.data_as<float>() + to * kHidden);
          std::copy_n(dx.data_as<float>() + from * kHidden, kHidden, out.sum.dx.data_as<float>() + to * kHidden);
        }
      for (auto [into, part] : {std::pair{out.sum.g.router, g.router},
                                {out.sum.g.fc1, g.fc1},
                                {out.sum.g.fc2, g.fc2},
                                {out.sum.g.shared_fc1, g.shared_fc1},
                                {out.sum.g.shared_fc2, g.shared_fc2}})
        add_into(into, part);
    } catch (...) {
      for (auto& m : group) m->abort();
      throw;
    }
  });
  return out;
}

class MoeContextParallel : public ::testing::TestWithParam<Case> {};

TEST_P(MoeContextParallel, MatchesTheWholeSequences) {
  const Case c = GetParam();
  const MoeMlpSpec spec = spec_of(c);
  const MoeMlpParams p = random_moe_params(spec, 11);
  const Tensor x = random_normal({kBatch * kSeq, kHidden}, 3), dy = random_normal({kBatch * kSeq, kHidden}, 4);
  const Result ref = run_whole(spec, p, x, dy);
  const Gathered got = run_context_parallel(spec, p, x, dy, c.C);

  EXPECT_LT(rel_error(got.sum.y, ref.y), 1e-6);
  EXPECT_LT(rel_error(got.sum.dx, ref.dx), 1e-5);
  EXPECT_LT(rel_error(got.sum.g.router, ref.g.router), 1e-5);
  EXPECT_LT(rel_error(got.sum.g.fc1, ref.g.fc1), 1e-5);
  EXPECT_LT(rel_error(got.sum.g.fc2, ref.g.fc2), 1e-5);
  if (c.shared) {
    EXPECT_LT(rel_error(got.sum.g.shared_fc1, ref.g.shared_fc1), 1e-5);
  }

  const MoeRouterLosses& r = ref.stats.losses;
  EXPECT_GT(r.aux_loss + r.seq_aux_loss, 0.0);
  EXPECT_GT(r.z_loss, 0.0);
  for (int k = 0; k < c.C; ++k) {
    const MoeMlpStats& s = got.stats[size_t(k)];
    EXPECT_NEAR(s.losses.aux_loss, r.aux_loss, 1e-6 * r.aux_loss) << "context rank " << k;
    EXPECT_NEAR(s.losses.seq_aux_loss, r.seq_aux_loss, 1e-6 * r.seq_aux_loss) << "context rank " << k;
    EXPECT_NEAR(s.losses.z_loss, r.z_loss, 1e-6 * r.z_loss) << "context rank " << k;
    EXPECT_EQ(s.tokens_per_expert_max, ref.stats.tokens_per_expert_max) << "context rank " << k;
    EXPECT_DOUBLE_EQ(s.tokens_per_expert_mean, ref.stats.tokens_per_expert_mean) << "context rank " << k;
    EXPECT_EQ(s.dropped, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, MoeContextParallel,
    ::testing::Values(Case{"CP2_softmax_aux", 2, MoeLoadBalancing::aux_loss, MoeScoreFunction::softmax, true},
                      Case{"CP4_softmax_aux", 4, MoeLoadBalancing::aux_loss, MoeScoreFunction::softmax},
                      Case{"CP2_softmax_seq_aux", 2, MoeLoadBalancing::seq_aux_loss, MoeScoreFunction::softmax},
                      Case{"CP4_sigmoid_seq_aux", 4, MoeLoadBalancing::seq_aux_loss, MoeScoreFunction::sigmoid, true},
                      Case{"CP2_sigmoid_aux", 2, MoeLoadBalancing::aux_loss, MoeScoreFunction::sigmoid}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(MoeContextParallelRefusals, CapacityDroppingNamesBothFlags) {
  MoeMlpSpec spec = spec_of({"", 2, MoeLoadBalancing::aux_loss, MoeScoreFunction::softmax});
  spec.moe.moe_expert_capacity_factor = 1.0;
  try {
    spec.moe.validate_context_parallel(2);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--moe-expert-capacity-factor"), std::string::npos) << what;
    EXPECT_NE(what.find("--context-parallel-size 2"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(spec.moe.validate_context_parallel(1));
}

}  // namespace
}  // namespace troupe::test
