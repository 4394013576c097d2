// CUDA add / scale_inplace / convert / copy_columns against the CPU backend. Each GPU result is one f32
// operation rounded once to the storage type, so it must match the CPU result rounded
// the same way exactly.
#include <cmath>
#include <string>
#include <tuple>

#include "kernels/elementwise.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Element counts: pack-aligned, with a scalar tail, shorter than one pack.
constexpr int64_t kSizes[] = {4096, 1003, 5};

// A device tensor of `values` (host f32) stored as t; `misaligned` places it one element
// past a 16-byte boundary, which sends the kernels down their scalar path.
Tensor upload(const Tensor& values, DType t, bool misaligned) {
  const Context& g = gpu();
  if (!misaligned) return to_device(g, values, t);
  Tensor padded = Tensor::host(DType::f32, {values.numel() + 1});
  padded.at(0) = 0.0f;
  for (int64_t i = 0; i < values.numel(); ++i) padded.at(i + 1) = values.at(i);
  return to_device(g, padded, t).slice(1, values.shape());
}

class ElementwiseCuda : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(ElementwiseCuda, AddMatchesCpu) {
  const auto [t, misaligned] = GetParam();
  for (int64_t n : kSizes) {
    Tensor a = round_through(random_normal({n}, 1), t), b = round_through(random_normal({n}, 2), t);
    Tensor ref = Tensor::host(DType::f32, {n});
    add(cpu(), a, b, ref);
    Tensor ad = upload(a, t, misaligned), bd = upload(b, t, misaligned), out = upload(a, t, misaligned);
    add(gpu(), ad, bd, out);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), out), round_through(ref, t)), 0.0) << "n = " << n;
    add(gpu(), ad, bd, ad);  // out aliases a
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), ad), round_through(ref, t)), 0.0) << "in place, n = " << n;
  }
}

TEST_P(ElementwiseCuda, ScaleInplaceMatchesCpu) {
  const auto [t, misaligned] = GetParam();
  for (int64_t n : kSizes) {
    Tensor x = round_through(random_normal({n}, 3), t);
    Tensor xd = upload(x, t, misaligned);
    scale_inplace(cpu(), x, 0.3f);
    scale_inplace(gpu(), xd, 0.3f);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), xd), round_through(x, t)), 0.0) << "n = " << n;
  }
}

TEST_P(ElementwiseCuda, ConvertMatchesHostRounding) {
  const auto [src_type, misaligned] = GetParam();
  for (DType dst_type : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t n : kSizes) {
      // Values spread over many binades, a few beyond f16's range, exactly representable in src.
      Tensor x = random_normal({n}, 4, 1.0f);
      for (int64_t i = 0; i < n; ++i) x.at(i) *= std::exp2(float(i % 41 - 24));
      x = round_through(x, src_type);
      Tensor src = upload(x, src_type, misaligned), dst = upload(random_normal({n}, 5), dst_type, misaligned);
      convert(gpu(), src, dst);
      EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), dst), round_through(x, dst_type)), 0.0)
          << dtype_name(src_type) << " -> " << dtype_name(dst_type) << ", n = " << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ElementwiseCuda,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16, DType::f32), ::testing::Bool()),
                         [](const auto& info) {
                           return str_cat(dtype_name(std::get<0>(info.param)),
                                          std::get<1>(info.param) ? "_misaligned" : "_aligned");
                         });

// A device slice's columns into pinned host rows (a tensor-parallel rank's logits) and into
// device rows: the same bytes where the CPU copy puts them, the other columns untouched.
TEST(CopyColumnsCuda, MatchesTheCpu) {
  const Tensor values = random_normal({5, 37}, 6);
  Tensor expected = Tensor::host(DType::f32, {5, 50});
  for (int64_t i = 0; i < expected.numel(); ++i) expected.at(i) = float(i);
  Tensor start = Tensor::host(DType::f32, {5, 50});
  copy(cpu(), expected, start);
  copy_columns(cpu(), values, 3, expected, 11, 30);
  const Tensor src = to_device(gpu(), values, DType::f32);
  Tensor pinned = Tensor::pinned_host(DType::f32, {5, 50});
  copy(cpu(), start, pinned);
  copy_columns(gpu(), src, 3, pinned, 11, 30);
  Tensor on_device = to_device(gpu(), start, DType::f32);
  copy_columns(gpu(), src, 3, on_device, 11, 30);
  gpu().synchronize();
  EXPECT_EQ(max_abs_diff(pinned, expected), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), on_device), expected), 0.0);
}

}  // namespace
}  // namespace troupe::test
