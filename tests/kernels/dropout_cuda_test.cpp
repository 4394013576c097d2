// CUDA dropout against the CPU backend: the same mask, element for element, in bf16, f16 and f32,
// for aligned and unaligned offsets and pointers.
#include "kernels/dropout.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

class DropoutCuda : public ::testing::TestWithParam<DType> {};

TEST_P(DropoutCuda, MaskIsIdenticalToCpu) {
  const DType t = GetParam();
  const int64_t n = 10007;  // not a multiple of 4
  const float p = 0.3f;
  const uint64_t seed = 0xfeedbeefcafe1234ull;
  Tensor x = round_through(random_uniform({n}, 41, 0.5f, 2.0f), t);  // never 0: y == 0 means dropped
  Tensor xd = to_device(gpu(), x, t);
  for (uint64_t offset : {uint64_t(0), uint64_t(3), uint64_t(4), uint64_t(1001), uint64_t(1) << 40}) {
    for (int64_t shift : {0, 1}) {  // shift 1: pointers not aligned to 4 elements
      SCOPED_TRACE(testing::Message() << "offset " << offset << " shift " << shift);
      const int64_t m = n - shift;
      Tensor y_ref = Tensor::host(DType::f32, {m});
      dropout_forward(cpu(), x.slice(shift, {m}), y_ref, p, seed, offset);
      Tensor yd = Tensor::empty(gpu(), t, {n});
      dropout_forward(gpu(), xd.slice(shift, {m}), yd.slice(shift, {m}), p, seed, offset);
      const Tensor y = to_host_f32(gpu(), yd.slice(shift, {m}));
      int64_t mask_mismatches = 0, dropped = 0;
      for (int64_t i = 0; i < m; ++i) {
        mask_mismatches += (y.at(i) == 0.0f) != (y_ref.at(i) == 0.0f);
        dropped += y_ref.at(i) == 0.0f;
      }
      EXPECT_EQ(mask_mismatches, 0);
      EXPECT_NEAR(double(dropped) / double(m), p, 0.03);
      EXPECT_LT(rel_error(y, y_ref), t == DType::f32 ? 1e-7 : 5e-3);
    }
  }
}

TEST_P(DropoutCuda, BackwardInPlaceMatchesCpu) {
  const DType t = GetParam();
  const int64_t n = 4096 + 6;
  const float p = 0.1f;
  Tensor dy = round_through(random_normal({n}, 42), t);
  Tensor dx_ref = Tensor::host(DType::f32, {n});
  dropout_backward(cpu(), dy, dx_ref, p, 77, 12);
  Tensor d = to_device(gpu(), dy, t);
  dropout_backward(gpu(), d, d, p, 77, 12);  // dx aliases dy
  const Tensor dx = to_host_f32(gpu(), d);
  int64_t mask_mismatches = 0;
  for (int64_t i = 0; i < n; ++i) mask_mismatches += (dx.at(i) == 0.0f) != (dx_ref.at(i) == 0.0f);
  EXPECT_EQ(mask_mismatches, 0);
  EXPECT_LT(rel_error(dx, dx_ref), t == DType::f32 ? 1e-7 : 5e-3);
}

INSTANTIATE_TEST_SUITE_P(Types, DropoutCuda, ::testing::Values(DType::bf16, DType::f16, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace troupe::test
