// argmax_logprob on CUDA (bf16, f16, f32 logits) against the CPU on the same values: the same
// token in every row (ties included: the first of equal maxima), the same log-softmax within
// f32 rounding, the same row maxima, padding columns ignored, GPT-2's vocabulary width; rows
// padded to 50,304 (read in 16-byte packs) and to 50,260 (bf16/f16 rows then not 16-byte
// aligned: element by element; f32: packs plus a scalar tail).
#include <cmath>
#include <cstdio>
#include <tuple>

#include "kernels/argmax.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

class ArgmaxCuda : public ::testing::TestWithParam<std::tuple<DType, int64_t, int64_t>> {};

TEST_P(ArgmaxCuda, MatchesCpu) {
  const auto [t, S, vp] = GetParam();
  const int64_t vocab = 50257;
  // Values rounded through the device type, so both sides see the same numbers.
  Tensor host = round_through(random_normal({S, vp}, uint64_t(S), 4.0f), t);
  float* x = host.data_as<float>();
  for (int64_t r = 0; r < S; ++r) {
    x[r * vp + vocab + 1] = 1000.0f;                                     // padding is never chosen
    if (r % 3 == 0) x[r * vp + 17 * r] = x[r * vp + 40000 - r] = 30.0f;  // a tie
    if (r % 3 == 1) x[r * vp + vocab - 1] = 30.0f;                       // the last real column
    if (r % 3 == 2) x[r * vp + 803 + r % 2] = x[r * vp + 805] = 30.0f;   // a tie within 8 columns
  }
  Tensor tok_cpu = Tensor::host(DType::i32, {S}), lp_cpu = Tensor::host(DType::f32, {S});
  Tensor max_cpu = Tensor::host(DType::f32, {S});
  argmax_logprob(cpu(), host, vocab, tok_cpu, lp_cpu, max_cpu);
  Tensor tok = Tensor::empty(gpu(), DType::i32, {S}), lp = Tensor::empty(gpu(), DType::f32, {S});
  Tensor mx = Tensor::empty(gpu(), DType::f32, {S});
  argmax_logprob(gpu(), to_device(gpu(), host, t), vocab, tok, lp, mx);
  const Tensor tok_h = to_host_f32(gpu(), tok), lp_h = to_host_f32(gpu(), lp), mx_h = to_host_f32(gpu(), mx);
  double worst = 0.0;
  for (int64_t r = 0; r < S; ++r) {
    EXPECT_EQ(tok_h.data_as<int32_t>()[r], tok_cpu.data_as<int32_t>()[r]) << "row " << r;
    EXPECT_EQ(mx_h.data_as<float>()[r], max_cpu.data_as<float>()[r]) << "row " << r;  // both read the same value
    worst = std::max(worst, std::abs(double(lp_h.data_as<float>()[r]) - lp_cpu.data_as<float>()[r]));
  }
  std::printf("%s S=%lld width %lld: tokens equal, max |logprob diff| %.2e\n", dtype_name(t), static_cast<long long>(S),
              static_cast<long long>(vp), worst);
  EXPECT_LT(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Types, ArgmaxCuda,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16, DType::f32),
                                            ::testing::Values(int64_t(1), int64_t(7), int64_t(64)),
                                            ::testing::Values(int64_t(50304), int64_t(50260))));

}  // namespace
}  // namespace troupe::test
