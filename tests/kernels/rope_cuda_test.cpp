// CUDA rotary embedding against the CPU reference in bf16 and f16.
#include <cstdio>
#include <tuple>

#include "kernels/rope.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct RopeCase {
  int64_t B, T;
  RopeConfig cfg;
};

class RopeCuda : public ::testing::TestWithParam<std::tuple<RopeCase, DType>> {};

TEST_P(RopeCuda, ForwardAndInverseMatchCpu) {
  const auto [c, t] = GetParam();
  const Shape shape{c.B, c.T, int64_t(c.cfg.n_heads + 2 * c.cfg.n_kv_heads) * c.cfg.head_dim};
  Tensor x = round_through(random_normal(shape, 31), t);
  Tensor ref = Tensor::host(DType::f32, shape);
  copy(cpu(), x, ref);
  rope_apply(cpu(), ref, c.cfg, false);

  Tensor xd = to_device(gpu(), x, t);
  rope_apply(gpu(), xd, c.cfg, false);
  EXPECT_LT(rel_error(to_host_f32(gpu(), xd), ref), 1e-2);
  rope_apply(gpu(), xd, c.cfg, true);
  EXPECT_LT(rel_error(to_host_f32(gpu(), xd), x), 2e-2);  // two roundings to 16 bits
}

TEST_P(RopeCuda, PerTokenPositionsMatchCpu) {
  const auto [c, t] = GetParam();
  const Shape shape{c.B, c.T, int64_t(c.cfg.n_heads + 2 * c.cfg.n_kv_heads) * c.cfg.head_dim};
  Tensor x = round_through(random_normal(shape, 32), t);
  Tensor positions = random_tokens({c.B * c.T}, 33, 4096);
  Tensor ref = Tensor::host(DType::f32, shape);
  copy(cpu(), x, ref);
  rope_apply_at(cpu(), ref, positions, c.cfg, false);
  Tensor xd = to_device(gpu(), x, t);
  rope_apply_at(gpu(), xd, to_device(gpu(), positions, DType::i32), c.cfg, false);
  const double err = rel_error(to_host_f32(gpu(), xd), ref);
  std::printf("rope_apply_at %s: rel err %.2e\n", dtype_name(t), err);
  EXPECT_LT(err, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeCuda,
    ::testing::Combine(::testing::Values(RopeCase{2, 100, {4, 2, 64, 10000.0f, 7}},
                                         RopeCase{1, 33, {3, 3, 128, 500000.0f, 0}},
                                         RopeCase{1, 64, {2, 1, 64, 10000.0f, 3000}},
                                         // Llama 3.1's frequency scaling, all three bands
                                         RopeCase{1, 64, {4, 2, 64, 500000.0f, 5000, {true, 8.0f, 1.0f, 4.0f, 64.0f}}}),
                       ::testing::Values(DType::bf16, DType::f16)));

}  // namespace
}  // namespace troupe::test
