// CUDA MoE router losses (load balancing per microbatch and per sequence, z-loss) and their
// gradients against the CPU backend, for both score functions, and the same value on a rerun
// (no float atomics in the sums).
#include "kernels/moe_router_losses.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct LossCase {
  MoeScoreFunction fn;
  int k;
  int64_t group_tokens;
};

class MoeRouterLossesCuda : public ::testing::TestWithParam<LossCase> {};

TEST_P(MoeRouterLossesCuda, MatchesCpu) {
  const LossCase c = GetParam();
  const int64_t n = 2048, e = 64;
  const float coeff = 1e-2f;
  Tensor logits = random_normal({n, e}, 3, 1.5f);
  Tensor tokens = Tensor::host(DType::f32, {n / c.group_tokens, e}), loss = Tensor::host(DType::f32, {1});
  Tensor z = Tensor::host(DType::f32, {1});
  // Zero to start (a large start would hide the gradients in the relative error); the z-loss
  // backward then accumulates onto the balance loss's.
  Tensor dlogits = Tensor::host_f32({n, e}, std::vector<float>(size_t(n * e), 0.0f));
  Tensor dlogits_gpu = to_device(gpu(), dlogits, DType::f32);
  moe_balance_loss_forward(cpu(), logits, c.fn, c.k, c.group_tokens, coeff, tokens, loss);
  moe_balance_loss_backward(cpu(), logits, tokens, c.fn, c.k, 2.0f * coeff, dlogits);
  moe_z_loss_forward(cpu(), logits, 1e-3f, z);
  moe_z_loss_backward(cpu(), logits, 2e-3f, dlogits);

  const Tensor ld = to_device(gpu(), logits, DType::f32);
  Tensor td = Tensor::empty(gpu(), DType::f32, tokens.shape()), lossd = Tensor::empty(gpu(), DType::f32, {1});
  Tensor zd = Tensor::empty(gpu(), DType::f32, {1});
  moe_balance_loss_forward(gpu(), ld, c.fn, c.k, c.group_tokens, coeff, td, lossd);
  moe_balance_loss_backward(gpu(), ld, td, c.fn, c.k, 2.0f * coeff, dlogits_gpu);
  moe_z_loss_forward(gpu(), ld, 1e-3f, zd);
  moe_z_loss_backward(gpu(), ld, 2e-3f, dlogits_gpu);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), td), tokens), 0.0);
  EXPECT_NEAR(to_host_f32(gpu(), lossd).at(0), loss.at(0), 1e-5 * loss.at(0));
  EXPECT_NEAR(to_host_f32(gpu(), zd).at(0), z.at(0), 1e-5 * z.at(0));
  EXPECT_LT(rel_error(to_host_f32(gpu(), dlogits_gpu), dlogits), 1e-5);

  Tensor again = Tensor::empty(gpu(), DType::f32, {1});
  moe_balance_loss_forward(gpu(), ld, c.fn, c.k, c.group_tokens, coeff, td, again);
  EXPECT_EQ(to_host_f32(gpu(), again).at(0), to_host_f32(gpu(), lossd).at(0));
}

INSTANTIATE_TEST_SUITE_P(Modes, MoeRouterLossesCuda,
                         ::testing::Values(LossCase{MoeScoreFunction::softmax, 2, 2048},
                                           LossCase{MoeScoreFunction::softmax, 8, 512},
                                           LossCase{MoeScoreFunction::sigmoid, 6, 2048},
                                           LossCase{MoeScoreFunction::sigmoid, 6, 256}));

}  // namespace
}  // namespace troupe::test
