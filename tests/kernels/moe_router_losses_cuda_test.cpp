// CUDA MoE router losses (load balancing per microbatch and per sequence, z-loss) and their
// gradients against the CPU backend, for both score functions, also as one context rank's part
// (whole groups and the z-loss's mean over more rows than these), and the same value on a rerun
// (no float atomics in the sums).
#include "kernels/moe_router_losses.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct LossCase {
  MoeScoreFunction fn;
  int k;
  int64_t group_tokens;
  int64_t context = 1;  // context ranks: whole groups (and the z-loss's mean) over this many times the rows
  int64_t group_size = 0;
};

class MoeRouterLossesCuda : public ::testing::TestWithParam<LossCase> {};

TEST_P(MoeRouterLossesCuda, MatchesCpu) {
  LossCase c = GetParam();
  c.group_size = c.group_tokens * c.context;
  const int64_t n = 2048, e = 64;
  const float coeff = 1e-2f;
  Tensor logits = random_normal({n, e}, 3, 1.5f);
  Tensor tokens = Tensor::host(DType::f32, {n / c.group_tokens, e}), loss = Tensor::host(DType::f32, {1});
  Tensor z = Tensor::host(DType::f32, {1});
  // Zero to start (a large start would hide the gradients in the relative error); the z-loss
  // backward then accumulates onto the balance loss's.
  Tensor dlogits = Tensor::host_f32({n, e}, std::vector<float>(size_t(n * e), 0.0f));
  Tensor dlogits_gpu = to_device(gpu(), dlogits, DType::f32);
  moe_balance_counts(cpu(), logits, c.fn, c.k, c.group_tokens, tokens);
  moe_balance_loss_forward(cpu(), logits, tokens, c.fn, c.k, c.group_size, coeff, loss);
  moe_balance_loss_backward(cpu(), logits, tokens, c.fn, c.k, c.group_size, 2.0f * coeff, dlogits);
  moe_z_loss_forward(cpu(), logits, 1e-3f, n * c.context, z);
  moe_z_loss_backward(cpu(), logits, 2e-3f, n * c.context, dlogits);

  const Tensor ld = to_device(gpu(), logits, DType::f32);
  Tensor td = Tensor::empty(gpu(), DType::f32, tokens.shape()), lossd = Tensor::empty(gpu(), DType::f32, {1});
  Tensor zd = Tensor::empty(gpu(), DType::f32, {1});
  moe_balance_counts(gpu(), ld, c.fn, c.k, c.group_tokens, td);
  moe_balance_loss_forward(gpu(), ld, td, c.fn, c.k, c.group_size, coeff, lossd);
  moe_balance_loss_backward(gpu(), ld, td, c.fn, c.k, c.group_size, 2.0f * coeff, dlogits_gpu);
  moe_z_loss_forward(gpu(), ld, 1e-3f, n * c.context, zd);
  moe_z_loss_backward(gpu(), ld, 2e-3f, n * c.context, dlogits_gpu);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), td), tokens), 0.0);
  EXPECT_NEAR(to_host_f32(gpu(), lossd).at(0), loss.at(0), 1e-5 * loss.at(0));
  EXPECT_NEAR(to_host_f32(gpu(), zd).at(0), z.at(0), 1e-5 * z.at(0));
  EXPECT_LT(rel_error(to_host_f32(gpu(), dlogits_gpu), dlogits), 1e-5);

  Tensor again = Tensor::empty(gpu(), DType::f32, {1});
  moe_balance_loss_forward(gpu(), ld, td, c.fn, c.k, c.group_size, coeff, again);
  EXPECT_EQ(to_host_f32(gpu(), again).at(0), to_host_f32(gpu(), lossd).at(0));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, MoeRouterLossesCuda,
    ::testing::Values(LossCase{MoeScoreFunction::softmax, 2, 2048}, LossCase{MoeScoreFunction::softmax, 8, 512},
                      LossCase{MoeScoreFunction::sigmoid, 6, 2048}, LossCase{MoeScoreFunction::sigmoid, 6, 256},
                      LossCase{MoeScoreFunction::softmax, 2, 256, 4}, LossCase{MoeScoreFunction::sigmoid, 6, 2048, 2}));

}  // namespace
}  // namespace troupe::test
