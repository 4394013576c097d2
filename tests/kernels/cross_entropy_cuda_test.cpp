// CUDA cross-entropy against the CPU backend in bf16 and f16, on the GPT-2 padded vocabulary
// (row cached in shared memory) and a Llama-3-sized one (too long to cache: re-read path).
#include <chrono>
#include <cmath>
#include <cstdio>

#include "kernels/cross_entropy.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct Problem {
  int64_t rows, padded_vocab, vocab;
};

// Random targets in [0, vocab); every 5th row ignored (-1).
Tensor make_targets(int64_t rows, int64_t vocab, uint64_t seed) {
  Tensor t = random_tokens({rows}, seed, int32_t(vocab));
  for (int64_t r = 0; r < rows; r += 5) t.data_as<int32_t>()[r] = -1;
  return t;
}

class CrossEntropyCuda : public ::testing::TestWithParam<DType> {};

TEST_P(CrossEntropyCuda, MatchesCpu) {
  const DType t = GetParam();
  for (const Problem& p :
       {Problem{64, 50304, 50257}, Problem{37, 50304, 50257}, Problem{9, 128256, 128000}, Problem{3, 64, 50}}) {
    SCOPED_TRACE(testing::Message() << "N " << p.rows << " Vp " << p.padded_vocab << " V " << p.vocab);
    // fp16 gradients go through a loss scale in training; without one, softmax values of
    // 1/V would sit in f16's subnormal range.
    const float grad_scale = (t == DType::f16 ? 1024.0f : 1.0f) / float(p.rows);
    Tensor logits = round_through(random_normal({p.rows, p.padded_vocab}, 31, 3.0f), t);
    Tensor targets = make_targets(p.rows, p.vocab, 32);
    Tensor loss_ref = Tensor::host(DType::f32, {p.rows}), dlogits_ref = Tensor::host(DType::f32, logits.shape());
    copy(cpu(), logits, dlogits_ref);
    cross_entropy_forward_backward(cpu(), dlogits_ref, targets, p.vocab, grad_scale, loss_ref);

    Tensor xd = to_device(gpu(), logits, t), td = to_device(gpu(), targets, DType::i32);
    Tensor loss_fwd = Tensor::empty(gpu(), DType::f32, {p.rows}),
           loss_fused = Tensor::empty(gpu(), DType::f32, {p.rows});
    cross_entropy_forward(gpu(), xd, td, p.vocab, loss_fwd);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), xd), logits), 0.0) << "forward must leave logits untouched";
    cross_entropy_forward_backward(gpu(), xd, td, p.vocab, grad_scale, loss_fused);

    const Tensor fwd = to_host_f32(gpu(), loss_fwd), fused = to_host_f32(gpu(), loss_fused);
    const Tensor dlogits = to_host_f32(gpu(), xd);
    EXPECT_LT(rel_error(fwd, loss_ref), 1e-5);
    EXPECT_LT(rel_error(fused, loss_ref), 1e-5);
    EXPECT_LT(rel_error(dlogits, dlogits_ref), t == DType::bf16 ? 8e-3 : 2e-3);
    int64_t nonzero_padding = 0, nonzero_ignored = 0;
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t j = 0; j < p.padded_vocab; ++j) {
        const float g = dlogits.at(r * p.padded_vocab + j);
        nonzero_padding += j >= p.vocab && g != 0.0f;
        nonzero_ignored += r % 5 == 0 && g != 0.0f;
      }
    EXPECT_EQ(nonzero_padding, 0);
    EXPECT_EQ(nonzero_ignored, 0);
  }
}

// A target outside [0, V) other than -1 cannot throw from a kernel: the loss turns NaN.
TEST_P(CrossEntropyCuda, InvalidTargetGivesNanLoss) {
  const DType t = GetParam();
  Tensor logits = to_device(gpu(), random_normal({2, 64}, 33), t);
  Tensor targets = Tensor::host(DType::i32, {2});
  targets.data_as<int32_t>()[0] = 3;
  targets.data_as<int32_t>()[1] = 60;  // in the padding of V = 50
  Tensor losses = Tensor::empty(gpu(), DType::f32, {2});
  cross_entropy_forward_backward(gpu(), logits, to_device(gpu(), targets, DType::i32), 50, 1.0f, losses);
  const Tensor h = to_host_f32(gpu(), losses);
  EXPECT_TRUE(std::isfinite(h.at(0)));
  EXPECT_TRUE(std::isnan(h.at(1)));
}

INSTANTIATE_TEST_SUITE_P(Types, CrossEntropyCuda, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Informational: the GPT-2 benchmark's loss, [16384, 50304] bf16 (1.65 GB of logits), and a
// Llama-3-sized vocabulary whose rows do not fit in shared memory (pass 2 re-reads them).
TEST(CrossEntropyCudaPerf, FusedKernelBandwidth) {
  for (const Problem& p : {Problem{16384, 50304, 50257}, Problem{4096, 128256, 128000}}) {
    const int64_t block_rows = 256;
    Tensor logits = Tensor::empty(gpu(), DType::bf16, {p.rows, p.padded_vocab});
    const Tensor block = to_device(gpu(), random_normal({block_rows, p.padded_vocab}, 34, 3.0f), DType::bf16);
    for (int64_t r = 0; r < p.rows; r += block_rows)
      copy(gpu(), block, logits.slice(r * p.padded_vocab, {block_rows, p.padded_vocab}));
    Tensor targets = to_device(gpu(), random_tokens({p.rows}, 35, int32_t(p.vocab)), DType::i32);
    Tensor losses = Tensor::empty(gpu(), DType::f32, {p.rows});

    auto time_ms = [&](auto&& run) {
      run();  // warm-up
      gpu().synchronize();
      const int iters = 10;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run();
      gpu().synchronize();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
    };
    const double fwd_ms = time_ms([&] { cross_entropy_forward(gpu(), logits, targets, p.vocab, losses); });
    const Tensor first_losses = to_host_f32(gpu(), losses);
    const double fused_ms =
        time_ms([&] { cross_entropy_forward_backward(gpu(), logits, targets, p.vocab, 1.0f / float(p.rows), losses); });
    const double bytes = double(logits.nbytes());
    std::printf(
        "cross_entropy [%lld, %lld] bf16: forward %.3f ms (%.0f GB/s read), forward_backward %.3f ms "
        "(%.0f GB/s read + write)\n",
        (long long)p.rows, (long long)p.padded_vocab, fwd_ms, bytes / fwd_ms * 1e-6, fused_ms,
        2 * bytes / fused_ms * 1e-6);
    // Sanity of the timed data: for N(0, 9) logits over V classes the mean loss is about
    // ln(V) + 9 / 2 (15.3 for GPT-2's vocabulary).
    double mean = 0;
    for (int64_t r = 0; r < p.rows; ++r) mean += first_losses.at(r) / double(p.rows);
    EXPECT_NEAR(mean, std::log(double(p.vocab)) + 4.5, 1.0);
  }
}

}  // namespace
}  // namespace troupe::test
