// Context parallelism's ring on GPUs (model/context_parallel.hpp): C ranks, one GPU each, their
// passes over NCCL either on a pass stream of their own (posted before each step's blocks, so
// they overlap them; CUDA events order the streams) or on the compute stream. Every rank's rows
// of out, lse and dqkv equal those rows of the CPU's whole-sequence attention (f32) within
// bf16 noise, with the blocks on cuDNN and on the warp-per-row kernels.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <tuple>

#include "actors/fabric/fabric.hpp"
#include "kernels/attention.hpp"
#include "model/context_parallel.hpp"
#include "tests/model/context_rows.hpp"
#include "tests/kernels/attention_backend.hpp"
#include "tests/test_util.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace troupe::test {
namespace {

std::shared_ptr<actors::Fabric> g_fabric;  // NCCL ids and groups (MPI initialized once)
class FabricEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { g_fabric = actors::Fabric::init(); }
  void TearDown() override { g_fabric.reset(); }
};
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);

int gpu_count() {
#if TROUPE_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

void check_ring(int C, bool own_pass_ctx, Backend backend) {
  const UseBackend use(backend);
  const int64_t B = 2, T = 1024, Tl = T / C;
  const int H = 8, G = 2, D = 128;
  const AttentionConfig cfg{H, G, D};
  const int64_t W = int64_t(H + 2 * G) * D, HD = int64_t(H) * D;
  const DType t = DType::bf16;
  const Tensor qkv = round_through(random_normal({B, T, W}, 51, 1.5f), t);
  const Tensor dout = round_through(random_normal({B, T, HD}, 52), t);
  Tensor out = Tensor::host(DType::f32, {B, T, HD}), lse = Tensor::host(DType::f32, {B, H, T});
  Tensor dqkv = Tensor::host(DType::f32, qkv.shape());
  attention_forward(cpu(), qkv, cfg, out, lse);
  attention_backward(cpu(), dout, qkv, out, lse, cfg, dqkv);

  std::vector<std::unique_ptr<Context>> contexts, passes;
  std::vector<const Context*> members;
  for (int k = 0; k < C; ++k) {
    contexts.push_back(std::make_unique<Context>(Context::cuda(k)));
    passes.push_back(std::make_unique<Context>(Context::cuda(k)));
    members.push_back(contexts.back().get());
  }
  auto group = g_fabric->make_group(std::vector<int>(size_t(C), g_fabric->process()), members, {"cp"});
  std::mutex mu;
  double worst_out = 0, worst_lse = 0, worst_dqkv = 0;
  run_threads(C, [&](int k) {
    const Context& ctx = *contexts[size_t(k)];
    ctx.activate();
    const ContextParallel cp{k, C, group[size_t(k)].get(), own_pass_ctx ? passes[size_t(k)].get() : nullptr};
    const Tensor q = to_device(ctx, context_rows(cp, qkv, Tl, false), t);
    const Tensor dy = to_device(ctx, context_rows(cp, dout, Tl, false), t);
    const Tensor o = Tensor::empty(ctx, t, {B, Tl, HD}), l = Tensor::empty(ctx, DType::f32, {B, H, Tl});
    const Tensor dq = Tensor::empty(ctx, t, q.shape());
    context_attention_forward(ctx, cp, q, cfg, o, l);
    context_attention_backward(ctx, cp, dy, q, o, l, cfg, dq);
    const double e_out = rel_error(to_host_f32(ctx, o), context_rows(cp, out, Tl, false));
    const double e_lse = rel_error(to_host_f32(ctx, l), context_rows(cp, lse, Tl, true));
    const double e_dqkv = rel_error(to_host_f32(ctx, dq), context_rows(cp, dqkv, Tl, false));
    std::lock_guard lock(mu);
    worst_out = std::max(worst_out, e_out);
    worst_lse = std::max(worst_lse, e_lse);
    worst_dqkv = std::max(worst_dqkv, e_dqkv);
  });
  std::printf(
      "ring CP%d B=%lld T=%lld H=%d G=%d D=%d bf16 %s, passes on %s: worst rank's rel err vs CPU f32: out %.2e "
      "lse %.2e dqkv %.2e\n",
      C, (long long)B, (long long)T, H, G, D, backend_name(backend),
      own_pass_ctx ? "a pass stream" : "the compute stream", worst_out, worst_lse, worst_dqkv);
  EXPECT_LT(worst_out, 2e-2);
  EXPECT_LT(worst_lse, 2e-3);
  EXPECT_LT(worst_dqkv, 3e-2);
}

class ContextParallelCuda : public ::testing::TestWithParam<std::tuple<int, bool, Backend>> {};

TEST_P(ContextParallelCuda, RingMatchesCpuWholeSequence) {
  const auto [C, own_pass_ctx, backend] = GetParam();
  if (gpu_count() < C) GTEST_SKIP() << "needs " << C << " GPUs (one rank on each)";
  check_ring(C, own_pass_ctx, backend);
}

INSTANTIATE_TEST_SUITE_P(Rings, ContextParallelCuda,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Bool(),
                                            ::testing::Values(Backend::cudnn, Backend::flash)),
                         [](const auto& info) {
                           return str_cat("CP", std::get<0>(info.param),
                                          std::get<1>(info.param) ? "_pass_stream" : "_compute_stream", "_",
                                          backend_name(std::get<2>(info.param)));
                         });

}  // namespace
}  // namespace troupe::test
