// CUDA vocab-parallel cross-entropy against the CPU backend, bf16 and f16 logits, f32 statistics:
// each step on the same inputs, on shards of the GPT-2 padded vocabulary (with and without
// padding, all padding) and a small one; then the three steps on 4 GPU shards, all-reduced on
// the host, against the CPU's full cross-entropy.
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cross_entropy.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// One rank's shard: logits [rows, cols], columns [vocab_start, vocab_start + cols) of a padded
// vocabulary whose first `vocab` columns are real.
struct Shard {
  const char* name;
  int64_t rows, cols, vocab_start, vocab;
  int64_t valid() const { return std::clamp(vocab - vocab_start, int64_t(0), cols); }
};

Tensor f32(Shape shape) { return Tensor::host(DType::f32, std::move(shape)); }

// Random targets in [0, vocab), every 5th row ignored (-1), rows 1 and 2 on the shard's first
// and last valid columns (when it has any).
Tensor make_targets(const Shard& s, uint64_t seed) {
  Tensor t = random_tokens({s.rows}, seed, int32_t(s.vocab));
  int32_t* p = t.data_as<int32_t>();
  for (int64_t r = 0; r < s.rows; r += 5) p[r] = -1;
  if (s.valid() > 0 && s.rows > 2) {
    p[1] = int32_t(s.vocab_start);
    p[2] = int32_t(s.vocab_start + s.valid() - 1);
  }
  return t;
}

// The group's statistics as another rank's shards would change them: a larger max on some
// rows, more exponential mass, the target's logit where it is another rank's.
Tensor group_max(const Tensor& local) {
  Tensor out = f32(local.shape());
  for (int64_t n = 0; n < out.numel(); ++n)
    out.at(n) = std::isfinite(local.at(n)) ? local.at(n) + 0.25f * float(n % 3) : 1.0f;
  return out;
}
Tensor plus(const Tensor& a, float b) {
  Tensor out = f32(a.shape());
  for (int64_t n = 0; n < out.numel(); ++n) out.at(n) = a.at(n) + b;
  return out;
}

class VocabParallelCrossEntropyCuda : public ::testing::TestWithParam<DType> {};

TEST_P(VocabParallelCrossEntropyCuda, EachStepMatchesCpu) {
  const DType t = GetParam();
  const Context& g = gpu();
  for (const Shard& s : {Shard{"GPT-2 / 4, rank 1 (no padding)", 64, 12576, 12576, 50257},
                         Shard{"GPT-2 / 4, rank 3 (padding)", 64, 12576, 37728, 50257},
                         Shard{"GPT-2 / 8, rank 7 (padding)", 37, 6288, 44016, 50257},
                         Shard{"V 250 of 256 / 4, rank 3", 37, 64, 192, 250}, Shard{"all padding", 9, 64, 192, 190}}) {
    SCOPED_TRACE(s.name);
    const int64_t valid = s.valid();
    const float grad_scale = (t == DType::f16 ? 1024.0f : 1.0f) / float(s.rows);  // as cross_entropy_cuda_test
    const Tensor logits = round_through(random_normal({s.rows, s.cols}, 51, 3.0f), t);
    const Tensor targets = make_targets(s, 52);
    const Tensor x_d = to_device(g, logits, t), targets_d = to_device(g, targets, DType::i32);

    // a. row max: the same values, so exactly the same max.
    Tensor max_ref = f32({s.rows});
    vocab_parallel_max(cpu(), logits, valid, max_ref);
    Tensor max_d = Tensor::empty(g, DType::f32, {s.rows});
    vocab_parallel_max(g, x_d, valid, max_d);
    const Tensor max_h = to_host_f32(g, max_d);
    for (int64_t n = 0; n < s.rows; ++n) EXPECT_EQ(max_h.at(n), max_ref.at(n)) << "row_max[" << n << "]";

    // b. sum_exp and target_logit against the group's max.
    const Tensor row_max = group_max(max_ref);
    Tensor sum_ref = f32({s.rows}), picked_ref = f32({s.rows});
    vocab_parallel_sum_exp(cpu(), logits, targets, s.vocab_start, valid, row_max, sum_ref, picked_ref);
    Tensor sum_d = Tensor::empty(g, DType::f32, {s.rows}), picked_d = Tensor::empty(g, DType::f32, {s.rows});
    vocab_parallel_sum_exp(g, x_d, targets_d, s.vocab_start, valid, to_device(g, row_max, DType::f32), sum_d, picked_d);
    EXPECT_LT(rel_error(to_host_f32(g, sum_d), sum_ref), 1e-5);
    EXPECT_EQ(max_abs_diff(to_host_f32(g, picked_d), picked_ref), 0.0);

    // c. losses and dlogits from the group's statistics.
    const Tensor sum_exp = plus(sum_ref, 2.0f), target_logit = plus(picked_ref, 1.5f);
    const Tensor max_g = to_device(g, row_max, DType::f32), sum_g = to_device(g, sum_exp, DType::f32),
                 picked_g = to_device(g, target_logit, DType::f32);
    Tensor dlogits_ref = f32({s.rows, s.cols}), loss_ref = f32({s.rows});
    copy(cpu(), logits, dlogits_ref);
    vocab_parallel_loss(cpu(), dlogits_ref, targets, s.vocab_start, valid, row_max, sum_exp, target_logit, grad_scale,
                        true, loss_ref);
    Tensor loss_fwd = Tensor::empty(g, DType::f32, {s.rows}), loss_bwd = Tensor::empty(g, DType::f32, {s.rows});
    vocab_parallel_loss(g, x_d, targets_d, s.vocab_start, valid, max_g, sum_g, picked_g, grad_scale, false, loss_fwd);
    EXPECT_EQ(max_abs_diff(to_host_f32(g, x_d), logits), 0.0) << "backward = false must leave logits untouched";
    vocab_parallel_loss(g, x_d, targets_d, s.vocab_start, valid, max_g, sum_g, picked_g, grad_scale, true, loss_bwd);

    const Tensor fwd = to_host_f32(g, loss_fwd), bwd = to_host_f32(g, loss_bwd), dlogits = to_host_f32(g, x_d);
    EXPECT_LT(rel_error(fwd, loss_ref), 1e-5);
    EXPECT_EQ(max_abs_diff(fwd, bwd), 0.0);
    EXPECT_LT(rel_error(dlogits, dlogits_ref), t == DType::bf16 ? 8e-3 : 2e-3);
    std::printf("vocab-parallel loss %s [%lld, %lld] from column %lld: rel err losses %.1e dlogits %.1e\n",
                dtype_name(t), (long long)s.rows, (long long)s.cols, (long long)s.vocab_start, rel_error(fwd, loss_ref),
                rel_error(dlogits, dlogits_ref));
    int64_t nonzero_padding = 0, nonzero_ignored = 0;
    for (int64_t n = 0; n < s.rows; ++n)
      for (int64_t j = 0; j < s.cols; ++j) {
        const float d = dlogits.at(n * s.cols + j);
        nonzero_padding += j >= valid && d != 0.0f;
        nonzero_ignored += targets.data_as<int32_t>()[n] == -1 && d != 0.0f;
      }
    EXPECT_EQ(nonzero_padding, 0);
    EXPECT_EQ(nonzero_ignored, 0);
  }
}

// The model's three steps on 4 GPU shards, the all-reduces done on the host, against the CPU's
// cross_entropy_forward_backward on the whole [37, 256] matrix (V = 250: the last shard pads).
TEST_P(VocabParallelCrossEntropyCuda, FourShardsMatchTheFullCrossEntropy) {
  const DType t = GetParam();
  const Context& g = gpu();
  const int64_t rows = 37, padded_vocab = 256, vocab = 250, shards = 4, local = padded_vocab / shards;
  const float grad_scale = (t == DType::f16 ? 1024.0f : 1.0f) / float(rows);
  const Tensor logits = round_through(random_normal({rows, padded_vocab}, 53, 3.0f), t);
  Tensor targets = random_tokens({rows}, 54, int32_t(vocab));
  for (int64_t r = 0; r < rows; r += 5) targets.data_as<int32_t>()[r] = -1;
  Tensor dlogits_ref = f32({rows, padded_vocab}), loss_ref = f32({rows});
  copy(cpu(), logits, dlogits_ref);
  cross_entropy_forward_backward(cpu(), dlogits_ref, targets, vocab, grad_scale, loss_ref);

  struct Rank {
    Tensor x;  // device [rows, local]
    int64_t start, valid;
  };
  std::vector<Rank> ranks;
  for (int64_t r = 0; r < shards; ++r) {
    Tensor part = f32({rows, local});
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t j = 0; j < local; ++j) part.at(n * local + j) = logits.at(n * padded_vocab + r * local + j);
    ranks.push_back(Rank{to_device(g, part, t), r * local, std::clamp(vocab - r * local, int64_t(0), local)});
  }
  const Tensor targets_d = to_device(g, targets, DType::i32);
  Tensor stat = Tensor::empty(g, DType::f32, {rows}), stat2 = Tensor::empty(g, DType::f32, {rows});

  Tensor row_max = f32({rows});  // host all-reduces, in rank order
  for (size_t r = 0; r < ranks.size(); ++r) {
    vocab_parallel_max(g, ranks[r].x, ranks[r].valid, stat);
    const Tensor h = to_host_f32(g, stat);
    for (int64_t n = 0; n < rows; ++n) row_max.at(n) = r == 0 ? h.at(n) : std::max(row_max.at(n), h.at(n));
  }
  const Tensor max_g = to_device(g, row_max, DType::f32);
  Tensor sum_exp = f32({rows}), target_logit = f32({rows});
  for (size_t r = 0; r < ranks.size(); ++r) {
    vocab_parallel_sum_exp(g, ranks[r].x, targets_d, ranks[r].start, ranks[r].valid, max_g, stat, stat2);
    const Tensor s = to_host_f32(g, stat), p = to_host_f32(g, stat2);
    for (int64_t n = 0; n < rows; ++n) {
      sum_exp.at(n) = r == 0 ? s.at(n) : sum_exp.at(n) + s.at(n);
      target_logit.at(n) = r == 0 ? p.at(n) : target_logit.at(n) + p.at(n);
    }
  }
  const Tensor sum_g = to_device(g, sum_exp, DType::f32), picked_g = to_device(g, target_logit, DType::f32);
  Tensor dlogits = f32({rows, padded_vocab});
  for (const Rank& k : ranks) {
    vocab_parallel_loss(g, k.x, targets_d, k.start, k.valid, max_g, sum_g, picked_g, grad_scale, true, stat);
    EXPECT_LT(rel_error(to_host_f32(g, stat), loss_ref), 1e-5) << "losses of the rank from column " << k.start;
    const Tensor part = to_host_f32(g, k.x);
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t j = 0; j < local; ++j) dlogits.at(n * padded_vocab + k.start + j) = part.at(n * local + j);
  }
  EXPECT_LT(rel_error(dlogits, dlogits_ref), t == DType::bf16 ? 8e-3 : 2e-3);
  std::printf("vocab-parallel cross-entropy %s, %zu shards vs the full one on the CPU: rel err dlogits %.1e\n",
              dtype_name(t), ranks.size(), rel_error(dlogits, dlogits_ref));
}

// A target a kernel can tell is no token (below -1, or in this shard's padding) cannot throw:
// its target_logit, loss and gradient row turn NaN. Another shard's target is not an error.
TEST_P(VocabParallelCrossEntropyCuda, BadTargetsGiveNan) {
  const DType t = GetParam();
  const Context& g = gpu();
  const int64_t rows = 4, cols = 64, start = 192, valid = 58;  // V = 250
  const Tensor logits = round_through(random_normal({rows, cols}, 55), t);
  Tensor targets = Tensor::host(DType::i32, {rows});
  const int32_t ids[rows] = {-2, 250, 100, 200};
  std::copy(ids, ids + rows, targets.data_as<int32_t>());
  const Tensor x_d = to_device(g, logits, t), targets_d = to_device(g, targets, DType::i32);
  Tensor max_d = Tensor::empty(g, DType::f32, {rows}), sum_d = Tensor::empty(g, DType::f32, {rows});
  Tensor picked_d = Tensor::empty(g, DType::f32, {rows}), losses = Tensor::empty(g, DType::f32, {rows});
  vocab_parallel_max(g, x_d, valid, max_d);
  vocab_parallel_sum_exp(g, x_d, targets_d, start, valid, max_d, sum_d, picked_d);
  const Tensor picked = to_host_f32(g, picked_d);
  EXPECT_TRUE(std::isnan(picked.at(0)));
  EXPECT_TRUE(std::isnan(picked.at(1)));
  EXPECT_EQ(picked.at(2), 0.0f);
  EXPECT_EQ(picked.at(3), logits.at(3 * cols + 8));

  vocab_parallel_loss(g, x_d, targets_d, start, valid, max_d, sum_d, to_device(g, picked, DType::f32), 1.0f, true,
                      losses);
  const Tensor loss_h = to_host_f32(g, losses), dlogits = to_host_f32(g, x_d);
  for (int64_t n = 0; n < rows; ++n) {
    const bool bad = n < 2;
    EXPECT_EQ(std::isnan(loss_h.at(n)), bad) << "losses[" << n << "] = " << loss_h.at(n);
    for (int64_t j = 0; j < cols; ++j)
      EXPECT_EQ(std::isnan(dlogits.at(n * cols + j)), bad) << "dlogits[" << n << ", " << j << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, VocabParallelCrossEntropyCuda, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace troupe::test
