// argmax_logprob on the CPU: the first of equal maxima, padding columns ignored, and the
// log-softmax at the chosen token equal to log(exp(x_t) / sum exp(x_j)) computed directly, and
// the optional row maximum.
#include <cmath>

#include "kernels/argmax.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

TEST(ArgmaxLogprob, FirstMaximumAmongRealColumnsAndItsLogSoftmax) {
  const int64_t S = 5, vocab = 1000, vp = 1024;
  Tensor logits = random_normal({S, vp}, 7, 3.0f);
  float* x = logits.data_as<float>();
  for (int64_t r = 0; r < S; ++r) x[r * vp + vocab + 3] = 100.0f;  // padding: larger than any real logit
  x[1 * vp + 10] = x[1 * vp + 900] = 50.0f;                        // a tie: the first wins
  x[2 * vp + 999] = 50.0f;                                         // the last real column
  Tensor tokens = Tensor::host(DType::i32, {S}), logprobs = Tensor::host(DType::f32, {S});
  Tensor maxes = Tensor::host(DType::f32, {S});
  argmax_logprob(cpu(), logits, vocab, tokens, logprobs, maxes);
  for (int64_t r = 0; r < S; ++r) {
    int64_t best = 0;
    for (int64_t j = 1; j < vocab; ++j)
      if (x[r * vp + j] > x[r * vp + best]) best = j;
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(double(x[r * vp + j]));
    EXPECT_EQ(tokens.data_as<int32_t>()[r], best) << "row " << r;
    EXPECT_EQ(maxes.data_as<float>()[r], x[r * vp + best]) << "row " << r;
    EXPECT_NEAR(logprobs.data_as<float>()[r], std::log(std::exp(double(x[r * vp + best])) / sum), 1e-5) << "row " << r;
  }
  EXPECT_EQ(tokens.data_as<int32_t>()[1], 10);
  EXPECT_EQ(tokens.data_as<int32_t>()[2], 999);
  EXPECT_NEAR(logprobs.data_as<float>()[1], -std::log(2.0), 1e-6);  // two equal maxima far above the rest
}

TEST(ArgmaxLogprob, RejectsBadArguments) {
  Tensor logits = random_normal({2, 8}, 1), tokens = Tensor::host(DType::i32, {2}), lp = Tensor::host(DType::f32, {2});
  EXPECT_THROW(argmax_logprob(cpu(), logits, 9, tokens, lp), Error);
  EXPECT_THROW(argmax_logprob(cpu(), logits, 8, Tensor::host(DType::i32, {3}), lp), Error);
  EXPECT_THROW(argmax_logprob(cpu(), logits, 8, tokens, Tensor::host(DType::i32, {2})), Error);
  EXPECT_THROW(argmax_logprob(cpu(), logits, 8, tokens, lp, Tensor::host(DType::f32, {3})), Error);
}

}  // namespace
}  // namespace troupe::test
