// The MoE MLP with expert parallelism (model/moe/expert_parallel.hpp) on CPU devices of one
// process (threads, an in-process expert group): with 8 experts over EP2 and EP4, each member
// routing its own tokens, every member's output and input gradient equal the one-device MLP's
// on the same tokens, its router and shared expert gradients too, and each member's expert
// gradients equal the sum over members of the one-device gradients of its experts (an expert
// sees every member's tokens). Dropless, with capacity dropping and padded to capacity; under
// mpirun -np 2, a group of one member per process (MPI).
#include <exception>
#include <thread>

#include "actors/fabric/collective_groups.hpp"
#include "actors/fabric/fabric.hpp"
#include "tests/test_util.hpp"
#include "tests/model/moe/moe_test_util.hpp"

namespace troupe::test {
namespace {

// One fabric for the whole binary: MPI starts once per process (the np2 run).
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

struct EpCase {
  std::string name;
  int ep;
  double capacity = 0;  // 0: dropless
  bool pad = false;
  bool shared = false;
};

void PrintTo(const EpCase& c, std::ostream* os) { *os << c.name; }

// Experts [first, first + count) of an [E, rows, cols] tensor (a view).
Tensor experts_of(const Tensor& t, int64_t first, int64_t count) {
  const int64_t per = t.dim(1) * t.dim(2);
  return t.slice(first * per, {count, t.dim(1), t.dim(2)});
}

struct Result {
  Tensor y, dx;
  MoeMlpParams g;
  MoeExpertExchange exchange;
  int64_t dropped = 0;
};

MoeMlpSpec spec_of(const EpCase& c) {
  MoeConfig m;
  m.num_experts = 8;
  m.moe_router_topk = 2;
  m.moe_aux_loss_coeff = 0.1f;
  m.moe_expert_capacity_factor = c.capacity;
  m.moe_pad_expert_input_to_capacity = c.pad;
  if (c.shared) m.moe_shared_expert_intermediate_size = 6;
  MoeMlpSpec spec{m, /*hidden=*/8, /*expert_ffn=*/6, /*swiglu=*/true};
  spec.moe.validate(1);
  return spec;
}

constexpr int64_t kSeq = 6, kTokens = 2 * kSeq;

// Forward and backward of member r's tokens: on one device with every expert (group null), or
// as member r of `group`, holding experts [r*E/EP, (r+1)*E/EP).
Result run_member(const MoeMlpSpec& spec, const MoeMlpParams& p, int r, Collectives* group) {
  const Tensor x = random_normal({kTokens, spec.hidden}, 7 + uint64_t(r)),
               dy = random_normal({kTokens, spec.hidden}, 50 + uint64_t(r));
  Result out;
  MoeMlpParams local = p;
  out.g = moe_mlp_params(spec);
  if (group != nullptr) {
    const int64_t el = spec.moe.num_experts / group->size();
    local.fc1 = experts_of(p.fc1, r * el, el);
    local.fc2 = experts_of(p.fc2, r * el, el);
    out.g.fc1 = experts_of(out.g.fc1, r * el, el);
    out.g.fc2 = experts_of(out.g.fc2, r * el, el);
  }
  MoeRouterState state = moe_router_state(spec.moe);
  MoeMlpActivations a;
  out.y = Tensor::host(DType::f32, {kTokens, spec.hidden});
  out.dx = Tensor::host(DType::f32, {kTokens, spec.hidden});
  moe_mlp_forward(cpu(), spec, local, state, x, kSeq, /*training=*/true, a, out.y, group);
  moe_mlp_backward(cpu(), spec, local, a, x, dy, /*loss_grad_scale=*/0.5f, out.dx, out.g, group);
  out.exchange = a.exchange;
  out.dropped = a.stats.dropped;
  return out;
}

// Member r of an expert group of `ep` against the one-device results of every member; returns
// the rows r sent to other members.
int64_t expect_member_matches(const EpCase& c, const MoeMlpSpec& spec, const std::vector<Result>& want, int r,
                              const Result& got) {
  const int64_t el = spec.moe.num_experts / c.ep;
  const Result& w = want[size_t(r)];
  EXPECT_LT(rel_error(got.y, w.y), 1e-6) << "member " << r;
  EXPECT_LT(rel_error(got.dx, w.dx), 1e-6) << "member " << r;
  EXPECT_LT(rel_error(got.g.router, w.g.router), 1e-6) << "member " << r;
  if (c.shared) {
    EXPECT_LT(rel_error(got.g.shared_fc1, w.g.shared_fc1), 1e-6) << "member " << r;
    EXPECT_LT(rel_error(got.g.shared_fc2, w.g.shared_fc2), 1e-6) << "member " << r;
  }
  EXPECT_EQ(got.dropped, w.dropped) << "member " << r << ": the capacity is of the local tokens";
  // The expert gradients: every member's tokens.
  for (const bool fc1 : {true, false}) {
    const Tensor mine = fc1 ? got.g.fc1 : got.g.fc2;
    Tensor sum = Tensor::host(DType::f32, mine.shape());
    fill_zero(cpu(), sum);
    for (int q = 0; q < c.ep; ++q) {
      const Tensor part = experts_of(fc1 ? want[size_t(q)].g.fc1 : want[size_t(q)].g.fc2, r * el, el);
      for (int64_t i = 0; i < sum.numel(); ++i) sum.at(i) += part.at(i);
    }
    EXPECT_LT(rel_error(mine, sum), 1e-5) << (fc1 ? "fc1" : "fc2") << " of member " << r;
  }
  int64_t crossing = 0;
  for (int q = 0; q < c.ep; ++q)
    if (q != r) crossing += got.exchange.send_rows[size_t(q)];
  return crossing;
}

std::vector<Result> one_device(const EpCase& c, const MoeMlpSpec& spec, const MoeMlpParams& p) {
  std::vector<Result> want;
  for (int r = 0; r < c.ep; ++r) want.push_back(run_member(spec, p, r, nullptr));
  return want;
}

class MoeExpertParallel : public ::testing::TestWithParam<EpCase> {};

TEST_P(MoeExpertParallel, EveryMemberMatchesOneDevice) {
  const EpCase& c = GetParam();
  const MoeMlpSpec spec = spec_of(c);
  const MoeMlpParams p = random_moe_params(spec, 100);
  const std::vector<Result> want = one_device(c, spec, p);

  // Expert parallel: one thread per member of an in-process group.
  auto group = actors::make_cpu_group(c.ep);
  std::vector<Result> got(size_t(c.ep));
  std::vector<std::exception_ptr> errors(size_t(c.ep));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.ep; ++r)
    threads.emplace_back([&, r] {
      try {
        got[size_t(r)] = run_member(spec, p, r, group[size_t(r)].get());
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& err : errors) {
    if (err) std::rethrow_exception(err);
  }

  int64_t crossing = 0, dropped = 0;
  for (int r = 0; r < c.ep; ++r) {
    crossing += expect_member_matches(c, spec, want, r, got[size_t(r)]);
    dropped += got[size_t(r)].dropped;
  }
  EXPECT_GT(crossing, 0) << "no row went to another member";
  if (c.capacity > 0) {
    EXPECT_GT(dropped, 0) << "the case should drop tokens";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MoeExpertParallel,
                         ::testing::Values(EpCase{"EP2_dropless", 2}, EpCase{"EP4_dropless_shared", 4, 0, false, true},
                                           EpCase{"EP2_capacity", 2, 1.0}, EpCase{"EP4_capacity_padded", 4, 1.0, true},
                                           EpCase{"EP8_one_expert_each", 8}),
                         [](const auto& info) { return info.param.name; });

// Under `mpirun -np 2` (ctest moe_expert_parallel_test_np2): an expert group with one member
// per process, its rows moving over MPI. Skipped in one process.
TEST(MoeExpertParallelMpi, MembersInTwoProcessesMatchOneDevice) {
  actors::Fabric& fabric = *test_fabric();
  if (fabric.processes() != 2) GTEST_SKIP() << "runs under mpirun -np 2";
  for (const EpCase& c : {EpCase{"EP2_dropless", 2}, EpCase{"EP2_capacity_shared", 2, 1.0, false, true}}) {
    const MoeMlpSpec spec = spec_of(c);
    const MoeMlpParams p = random_moe_params(spec, 100);
    const std::vector<Result> want = one_device(c, spec, p);
    const int r = fabric.process();
    std::vector<const Context*> contexts = {nullptr, nullptr};
    contexts[size_t(r)] = &cpu();
    actors::GroupOptions options;
    options.name = "moe_ep_" + c.name;
    auto group = fabric.make_group({0, 1}, contexts, options);
    const Result got = run_member(spec, p, r, group[size_t(r)].get());
    EXPECT_GT(expect_member_matches(c, spec, want, r, got), 0) << c.name << ": no row went to the other process";
  }
}

// Experts that do not split over the group stop before any exchange, naming both counts.
TEST(MoeExpertParallelErrors, ExpertsNotDivisibleByTheGroup) {
  auto group = actors::make_cpu_group(2);
  try {
    moe_expert_exchange(cpu(), *group[0], {0, 1, 2, 3});
    FAIL() << "3 experts over 2 members should throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("3 experts do not split evenly over an expert group of 2"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace troupe::test
