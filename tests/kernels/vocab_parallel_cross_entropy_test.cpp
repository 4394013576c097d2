// CPU vocab-parallel cross-entropy: T = 1, 2, 4 shards of the vocabulary, the all-reduces done
// by hand between the steps, against cross_entropy_forward_backward on the whole matrix.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cross_entropy.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

Tensor targets_of(const std::vector<int32_t>& values) {
  Tensor t = Tensor::host(DType::i32, {int64_t(values.size())});
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor out = Tensor::host(t.dtype(), t.shape());
  copy(cpu(), t, out);
  return out;
}

Tensor f32(Shape shape) { return Tensor::host(DType::f32, std::move(shape)); }

// Random targets in [0, vocab); every 5th row ignored (-1).
Tensor make_targets(int64_t rows, int64_t vocab, uint64_t seed) {
  Tensor t = random_tokens({rows}, seed, int32_t(vocab));
  for (int64_t r = 0; r < rows; r += 5) t.data_as<int32_t>()[r] = -1;
  return t;
}

// Columns [first, first + cols) of a host [N, Vp] matrix as a [N, cols] tensor, and back.
Tensor columns(const Tensor& m, int64_t first, int64_t cols) {
  const int64_t rows = m.dim(0), width = m.dim(1);
  Tensor out = f32({rows, cols});
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t j = 0; j < cols; ++j) out.at(n * cols + j) = m.at(n * width + first + j);
  return out;
}
void put_columns(const Tensor& part, const Tensor& m, int64_t first) {
  const int64_t rows = part.dim(0), cols = part.dim(1), width = m.dim(1);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t j = 0; j < cols; ++j) m.at(n * width + first + j) = part.at(n * cols + j);
}

// One rank of the group: its columns of the logits and its row statistics.
struct Rank {
  Tensor x;  // [N, Vl]; dlogits after step c with backward
  int64_t start, valid;
  Tensor row_max, sum_exp, target_logit;  // f32 [N]: this rank's, before the all-reduce
};

// The group's all-reduce of one statistic, in rank order.
Tensor all_reduce(const std::vector<Rank>& ranks, Tensor Rank::*stat, bool max) {
  Tensor out = copy_of(ranks[0].*stat);
  for (size_t r = 1; r < ranks.size(); ++r)
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float v = (ranks[r].*stat).at(i);
      out.at(i) = max ? std::max(out.at(i), v) : out.at(i) + v;
    }
  return out;
}

struct Sharded {
  Tensor losses;   // f32 [N], rank 0's (every rank's must be the same)
  Tensor dlogits;  // [N, Vp]: every rank's logits after step c, side by side
};

// Runs the three steps on `shards` ranks of logits [N, Vp] (left untouched).
Sharded run_vocab_parallel(const Tensor& logits, const Tensor& targets, int64_t vocab_size, int64_t shards,
                           float grad_scale, bool backward) {
  const int64_t rows = logits.dim(0), padded_vocab = logits.dim(1), local = padded_vocab / shards;
  std::vector<Rank> ranks;
  for (int64_t r = 0; r < shards; ++r) {
    const int64_t start = r * local;
    ranks.push_back(Rank{columns(logits, start, local), start, std::clamp(vocab_size - start, int64_t(0), local),
                         f32({rows}), f32({rows}), f32({rows})});
  }
  for (Rank& k : ranks) vocab_parallel_max(cpu(), k.x, k.valid, k.row_max);
  const Tensor row_max = all_reduce(ranks, &Rank::row_max, /*max=*/true);
  for (Rank& k : ranks)
    vocab_parallel_sum_exp(cpu(), k.x, targets, k.start, k.valid, row_max, k.sum_exp, k.target_logit);
  const Tensor sum_exp = all_reduce(ranks, &Rank::sum_exp, false);
  const Tensor target_logit = all_reduce(ranks, &Rank::target_logit, false);

  Sharded out{f32({rows}), f32({rows, padded_vocab})};
  for (const Rank& k : ranks) {
    Tensor losses = f32({rows});
    vocab_parallel_loss(cpu(), k.x, targets, k.start, k.valid, row_max, sum_exp, target_logit, grad_scale, backward,
                        losses);
    if (k.start == 0) copy(cpu(), losses, out.losses);
    EXPECT_EQ(max_abs_diff(losses, out.losses), 0.0) << "rank from " << k.start << ": losses differ from rank 0's";
    put_columns(k.x, out.dlogits, k.start);
  }
  return out;
}

struct Problem {
  int64_t rows, padded_vocab, vocab;
};

// The last shard holds padding (V = 250 of 256), or with V = 190 and 4 shards only padding.
TEST(VocabParallelCrossEntropy, ShardsMatchTheFullCrossEntropy) {
  const float grad_scale = 0.25f;
  for (const Problem& p : {Problem{37, 256, 250}, Problem{37, 256, 190}}) {
    const Tensor logits = random_normal({p.rows, p.padded_vocab}, 41, 3.0f);
    const Tensor targets = make_targets(p.rows, p.vocab, 42);
    Tensor dlogits_ref = copy_of(logits), losses_ref = f32({p.rows});
    cross_entropy_forward_backward(cpu(), dlogits_ref, targets, p.vocab, grad_scale, losses_ref);
    for (int64_t shards : {1, 2, 4}) {
      SCOPED_TRACE(testing::Message() << "V " << p.vocab << ", " << shards << " shards");
      const Sharded s = run_vocab_parallel(logits, targets, p.vocab, shards, grad_scale, /*backward=*/true);
      EXPECT_LT(rel_error(s.losses, losses_ref), 1e-6);
      EXPECT_LT(rel_error(s.dlogits, dlogits_ref), 1e-6);
      int64_t nonzero_padding = 0, nonzero_ignored = 0;
      for (int64_t n = 0; n < p.rows; ++n)
        for (int64_t j = 0; j < p.padded_vocab; ++j) {
          const float g = s.dlogits.at(n * p.padded_vocab + j);
          nonzero_padding += j >= p.vocab && g != 0.0f;
          nonzero_ignored += targets.data_as<int32_t>()[n] == -1 && g != 0.0f;
        }
      EXPECT_EQ(nonzero_padding, 0);
      EXPECT_EQ(nonzero_ignored, 0);
      for (int64_t n = 0; n < p.rows; n += 5) EXPECT_EQ(s.losses.at(n), 0.0f) << "ignored row " << n;
    }
  }
}

TEST(VocabParallelCrossEntropy, ForwardOnlyLeavesLogitsUntouched) {
  const Problem p{37, 256, 250};
  const Tensor logits = random_normal({p.rows, p.padded_vocab}, 43, 3.0f);
  const Tensor targets = make_targets(p.rows, p.vocab, 44);
  Tensor losses_ref = f32({p.rows});
  cross_entropy_forward(cpu(), logits, targets, p.vocab, losses_ref);
  for (int64_t shards : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << shards << " shards");
    const Sharded s = run_vocab_parallel(logits, targets, p.vocab, shards, 1.0f, /*backward=*/false);
    EXPECT_EQ(max_abs_diff(s.dlogits, logits), 0.0) << "backward = false must leave logits untouched";
    EXPECT_LT(rel_error(s.losses, losses_ref), 1e-6);
  }
}

// Step b on one shard of 4 columns starting at 8 (valid 3: column 11 is padding): the target's
// logit when it is one of the shard's, 0 for another shard's target and for ignored rows.
TEST(VocabParallelCrossEntropy, SumExpPicksOnlyThisShardsTargets) {
  const Tensor logits = Tensor::host_f32({4, 4}, {1, 2, 3, 50,  //
                                                  1, 2, 3, 50,  //
                                                  1, 2, 3, 50,  //
                                                  0, 0, 0, 50});
  const Tensor targets = targets_of({9, 3, -1, 10});
  const Tensor row_max = Tensor::host_f32({4}, {3, 5, 3, 0});  // the group's: row 1's max is another shard's
  Tensor sum_exp = f32({4}), picked = f32({4});
  vocab_parallel_sum_exp(cpu(), logits, targets, 8, 3, row_max, sum_exp, picked);
  const float expect_picked[4] = {2, 0, 0, 0};
  for (int n = 0; n < 4; ++n) EXPECT_EQ(picked.at(n), expect_picked[n]) << "target_logit[" << n << "]";
  EXPECT_NEAR(sum_exp.at(0), std::exp(-2.0) + std::exp(-1.0) + 1.0, 1e-6);
  EXPECT_NEAR(sum_exp.at(1), std::exp(-4.0) + std::exp(-3.0) + std::exp(-2.0), 1e-6);
  EXPECT_NEAR(sum_exp.at(3), 3.0, 1e-6);

  Tensor max = f32({4});
  vocab_parallel_max(cpu(), logits, 3, max);
  EXPECT_EQ(max.at(0), 3.0f);  // column 3 (50) is padding
  vocab_parallel_max(cpu(), logits, 0, max);
  EXPECT_EQ(max.at(0), -std::numeric_limits<float>::infinity());
}

void expect_error_mentions(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(VocabParallelCrossEntropy, BadArgumentsAreErrors) {
  const Tensor x = random_normal({2, 8}, 45), row = random_normal({2}, 46);
  Tensor sums = f32({2}), picked = f32({2}), losses = f32({2});
  auto sum_exp = [&](const Tensor& targets, int64_t start, int64_t valid) {
    vocab_parallel_sum_exp(cpu(), x, targets, start, valid, row, sums, picked);
  };
  auto loss = [&](const Tensor& targets, int64_t start, int64_t valid) {
    vocab_parallel_loss(cpu(), x, targets, start, valid, row, sums, picked, 1.0f, true, losses);
  };
  // A shard holding padding (valid 6 of 8 from 16) ends the vocabulary at 22.
  expect_error_mentions([&] { sum_exp(targets_of({0, 22}), 16, 6); }, "targets[1] = 22 is neither -1");
  expect_error_mentions([&] { loss(targets_of({0, 22}), 16, 6); }, "nor a token id in [0, 22)");
  expect_error_mentions([&] { loss(targets_of({-2, 3}), 16, 8); }, "targets[0] = -2");
  sum_exp(targets_of({0, 900}), 16, 8);  // no padding here: 900 may be another shard's
  expect_error_mentions([&] { sum_exp(targets_of({0, 1}), -8, 8); }, "vocab_start must be >= 0");
  expect_error_mentions([&] { vocab_parallel_max(cpu(), x, 9, row); }, "valid must be in [0, Vl = 8]");
  expect_error_mentions([&] { vocab_parallel_max(cpu(), x, -1, row); }, "valid must be in [0, Vl = 8]");
  expect_error_mentions([&] { vocab_parallel_max(cpu(), x, 8, f32({3})); }, "'row_max'");
  expect_error_mentions([&] { vocab_parallel_max(cpu(), x.view({16}), 8, row); }, "logits must be [N, Vl]");
  expect_error_mentions([&] { vocab_parallel_max(cpu(), Tensor::host(DType::i32, {2, 8}), 8, row); }, "'logits'");
  expect_error_mentions(
      [&] {
        vocab_parallel_sum_exp(cpu(), x, targets_of({0, 1}), 0, 8, row, f32({2, 1}), picked);
      },
      "'sum_exp'");
  expect_error_mentions(
      [&] {
        vocab_parallel_sum_exp(cpu(), x, targets_of({0, 1}), 0, 8, row, sums, f32({3}));
      },
      "'target_logit'");
  expect_error_mentions([&] { sum_exp(targets_of({0, 1, 2}), 0, 8); }, "'targets'");
  expect_error_mentions(
      [&] {
        vocab_parallel_loss(cpu(), x, targets_of({0, 1}), 0, 8, row, sums, picked, 1.0f, true, f32({1}));
      },
      "'losses'");
}

}  // namespace
}  // namespace troupe::test
