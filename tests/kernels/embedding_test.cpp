// CPU embedding against hand-computed values and finite differences; vocabulary shards
// against the whole table.
#include <string>
#include <vector>

#include "kernels/embedding.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

Tensor host_tokens(Shape shape, const std::vector<int32_t>& ids) {
  Tensor t = Tensor::host(DType::i32, std::move(shape));
  for (size_t i = 0; i < ids.size(); ++i) t.data_as<int32_t>()[i] = ids[i];
  return t;
}

// table[r, j] = scale * r + j: every element says where it came from.
Tensor indexed_table(int64_t rows, int64_t c, float scale) {
  Tensor t = Tensor::host(DType::f32, {rows, c});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j) t.at(r * c + j) = scale * float(r) + float(j);
  return t;
}

Tensor host_filled(const Shape& shape, float value) {
  Tensor t = Tensor::host(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.at(i) = value;
  return t;
}

void expect_error_mentions(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Embedding, ForwardKnownValues) {
  const int64_t c = 3;
  Tensor tokens = host_tokens({2, 2}, {1, 3, 0, 1});
  Tensor wte = indexed_table(4, c, 10.0f), wpe = indexed_table(5, c, 100.0f);
  Tensor out = Tensor::host(DType::f32, {2, 2, c});
  embedding_forward(cpu(), tokens, wte, wpe, out, /*pos_offset=*/2);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t j = 0; j < c; ++j) {
        const float tok = float(tokens.data_as<int32_t>()[b * 2 + t]);
        EXPECT_EQ(out.at((b * 2 + t) * c + j), 10.0f * tok + 100.0f * float(2 + t) + 2.0f * float(j))
            << "out[" << b << ", " << t << ", " << j << "]";
      }

  embedding_forward(cpu(), tokens, wte, Tensor(), out, 0);  // token embedding only
  EXPECT_EQ(out.at(1 * c + 2), 10.0f * 3 + 2);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int64_t vocab = 7, seq_len = 5, c = 8, positions = 9, offset = 3;
  Tensor tokens = host_tokens({2, seq_len}, {1, 1, 4, 6, 1, 0, 4, 4, 2, 6});  // repeats within and across rows
  Tensor wte = random_normal({vocab, c}, 1), wpe = random_normal({positions, c}, 2);
  Tensor r = random_normal({2, seq_len, c}, 3);  // loss = sum(out * r), so dout = r
  Tensor out = Tensor::host(DType::f32, {2, seq_len, c});
  auto loss = [&] {
    embedding_forward(cpu(), tokens, wte, wpe, out, offset);
    return dot(out, r);
  };
  Tensor dwte = host_filled({vocab, c}, 0.0f), dwpe = host_filled({positions, c}, 0.0f);
  embedding_backward(cpu(), tokens, r, dwte, dwpe, offset);
  expect_grad_close("embedding dwte", loss, wte, dwte, 48);
  expect_grad_close("embedding dwpe", loss, wpe, dwpe, 48);
}

// dwte rows add every occurrence of their token onto what was there; dwpe rows add the
// batch's gradients at their position; rows nobody used keep their value.
TEST(Embedding, BackwardAccumulatesRepeatedTokens) {
  const int64_t c = 2;
  Tensor tokens = host_tokens({2, 3}, {2, 0, 2, 2, 1, 0});
  Tensor dout = Tensor::host_f32({2, 3, c}, {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60});
  Tensor dwte = host_filled({4, c}, 1.0f), dwpe = host_filled({5, c}, 1.0f);
  embedding_backward(cpu(), tokens, dout, dwte, dwpe, /*pos_offset=*/1);
  const std::vector<float> want_wte = {1 + 3 + 50, 1 + 4 + 60, 1 + 30, 1 + 40, 1 + 1 + 5 + 10, 1 + 2 + 6 + 20, 1, 1};
  for (int64_t i = 0; i < dwte.numel(); ++i) EXPECT_EQ(dwte.at(i), want_wte[size_t(i)]) << "dwte[" << i << "]";
  const std::vector<float> want_wpe = {1,          1,          1 + 1 + 10, 1 + 2 + 20, 1 + 3 + 30,
                                       1 + 4 + 40, 1 + 5 + 50, 1 + 6 + 60, 1,          1};
  for (int64_t i = 0; i < dwpe.numel(); ++i) EXPECT_EQ(dwpe.at(i), want_wpe[size_t(i)]) << "dwpe[" << i << "]";
}

TEST(Embedding, OutOfRangeTokenIsAnErrorNamingItsPosition) {
  Tensor wte = indexed_table(7, 4, 1.0f), out = Tensor::host(DType::f32, {2, 3, 4});
  Tensor dwte = host_filled({7, 4}, 0.0f);
  Tensor too_big = host_tokens({2, 3}, {0, 1, 2, 3, 4, 7});
  expect_error_mentions([&] { embedding_forward(cpu(), too_big, wte, Tensor(), out, 0); }, "token id 7 at [1, 2]");
  expect_error_mentions([&] { embedding_backward(cpu(), too_big, out, dwte, Tensor(), 0); }, "token id 7 at [1, 2]");
  Tensor negative = host_tokens({2, 3}, {0, -1, 2, 3, 4, 5});
  expect_error_mentions([&] { embedding_forward(cpu(), negative, wte, Tensor(), out, 0); }, "token id -1 at [0, 1]");
}

// Tensor parallelism: T shards of the token table, rows [r * V / T, (r + 1) * V / T) each.
Tensor row_block(const Tensor& table, int64_t first, int64_t rows) {
  const int64_t c = table.dim(1);
  Tensor out = Tensor::host(DType::f32, {rows, c});
  copy(cpu(), table.slice(first * c, {rows, c}), out);
  return out;
}

// Summing the shards' forwards (the all-reduce) gives the full forward: each token's row comes
// from its own shard, zeros from the others. wpe is passed on shard 0 only, as a model would.
TEST(Embedding, ShardedForwardsSumToTheFullForward) {
  const int64_t vocab = 12, c = 8, batch = 3, seq_len = 5, positions = 9, offset = 2;
  Tensor tokens = random_tokens({batch, seq_len}, 21, int32_t(vocab));
  Tensor wte = random_normal({vocab, c}, 22), wpe = random_normal({positions, c}, 23);
  Tensor full = Tensor::host(DType::f32, {batch, seq_len, c});
  embedding_forward(cpu(), tokens, wte, wpe, full, offset);
  for (int64_t shards : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << shards << " shards");
    const int64_t rows = vocab / shards;
    Tensor sum = host_filled(full.shape(), 0.0f), part = Tensor::host(DType::f32, full.shape());
    for (int64_t r = 0; r < shards; ++r) {
      embedding_forward(cpu(), tokens, row_block(wte, r * rows, rows), r == 0 ? wpe : Tensor(), part, offset,
                        VocabShard{true, r * rows});
      for (int64_t i = 0; i < sum.numel(); ++i) sum.at(i) += part.at(i);
    }
    EXPECT_EQ(max_abs_diff(sum, full), 0.0);
  }
}

// A token of another shard reads a zero row: out is the position row alone, or zero. Ids past
// every shard are not errors (the shard cannot know the vocabulary); negative ids still are.
TEST(Embedding, ShardedForwardGivesZeroRowsForOtherShardsTokens) {
  const int64_t c = 3;
  Tensor tokens = host_tokens({1, 4}, {4, 1, 5, 100});  // the shard holds rows [4, 6)
  Tensor wte = indexed_table(2, c, 10.0f), wpe = indexed_table(4, c, 100.0f);
  Tensor out = Tensor::host(DType::f32, {1, 4, c});
  const VocabShard shard{true, 4};
  embedding_forward(cpu(), tokens, wte, wpe, out, 0, shard);
  const float token_row[4] = {0, -1, 1, -1};  // local row of each token, -1: another shard's
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t j = 0; j < c; ++j) {
      const float tok = token_row[t] < 0 ? 0.0f : 10.0f * token_row[t] + float(j);
      EXPECT_EQ(out.at(t * c + j), tok + 100.0f * float(t) + float(j)) << "out[0, " << t << ", " << j << "]";
    }
  embedding_forward(cpu(), tokens, wte, Tensor(), out, 0, shard);
  EXPECT_EQ(out.at(1 * c + 2), 0.0f);
  EXPECT_EQ(out.at(3 * c + 0), 0.0f);

  Tensor negative = host_tokens({1, 4}, {4, -1, 5, 4});
  Tensor dwte = host_filled({2, c}, 0.0f);
  expect_error_mentions([&] { embedding_forward(cpu(), negative, wte, Tensor(), out, 0, shard); },
                        "token id -1 at [0, 1] is negative");
  expect_error_mentions([&] { embedding_backward(cpu(), negative, out, dwte, Tensor(), 0, shard); },
                        "token id -1 at [0, 1] is negative");
  expect_error_mentions(
      [&] {
        embedding_forward(cpu(), tokens, wte, Tensor(), out, 0, VocabShard{true, -2});
      },
      "start = -2");
}

// Each shard's dwte is its row block of the full dwte (accumulated onto what was there), and
// every shard's dwpe is the full dwpe: all ranks see the whole dout.
TEST(Embedding, ShardedBackwardsGiveTheFullGradientsRowBlocks) {
  const int64_t vocab = 12, c = 72, batch = 3, seq_len = 7, positions = 8, offset = 1;  // c: two column tiles
  Tensor tokens = random_tokens({batch, seq_len}, 31, int32_t(vocab));
  Tensor dout = random_normal({batch, seq_len, c}, 32);
  Tensor dwte0 = random_normal({vocab, c}, 33), dwpe0 = random_normal({positions, c}, 34);
  Tensor dwte_full = row_block(dwte0, 0, vocab), dwpe_full = row_block(dwpe0, 0, positions);
  embedding_backward(cpu(), tokens, dout, dwte_full, dwpe_full, offset);
  for (int64_t shards : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << shards << " shards");
    const int64_t rows = vocab / shards;
    for (int64_t r = 0; r < shards; ++r) {
      Tensor dwte = row_block(dwte0, r * rows, rows), dwpe = row_block(dwpe0, 0, positions);
      embedding_backward(cpu(), tokens, dout, dwte, dwpe, offset, VocabShard{true, r * rows});
      EXPECT_EQ(max_abs_diff(dwte, row_block(dwte_full, r * rows, rows)), 0.0) << "dwte of shard " << r;
      EXPECT_EQ(max_abs_diff(dwpe, dwpe_full), 0.0) << "dwpe of shard " << r;
    }
  }
}

TEST(Embedding, BadArgumentsAreErrors) {
  Tensor tokens = host_tokens({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor wte = indexed_table(7, 4, 1.0f), wpe = indexed_table(4, 4, 1.0f), out = Tensor::host(DType::f32, {2, 3, 4});
  expect_error_mentions([&] { embedding_forward(cpu(), tokens, wte, wpe, out, 2); }, "positions [2, 5)");
  expect_error_mentions([&] { embedding_forward(cpu(), tokens, wte, wpe, out, -1); }, "positions [-1, 2)");
  expect_error_mentions(
      [&] {
        embedding_forward(cpu(), tokens, wte, Tensor(), Tensor::host(DType::f32, {2, 3, 5}), 0);
      },
      "'out'");
  expect_error_mentions([&] { embedding_forward(cpu(), tokens.view({6}), wte, Tensor(), out, 0); },
                        "tokens must be [B, T]");
  expect_error_mentions(
      [&] {
        embedding_forward(cpu(), Tensor::host(DType::f32, {2, 3}), wte, Tensor(), out, 0);
      },
      "'tokens'");
  expect_error_mentions([&] { embedding_forward(cpu(), tokens, wte, indexed_table(8, 5, 1.0f), out, 0); }, "'wpe'");
  expect_error_mentions([&] { embedding_backward(cpu(), tokens, out, indexed_table(7, 5, 1.0f), Tensor(), 0); },
                        "'dwte'");
  expect_error_mentions(
      [&] {
        embedding_backward(cpu(), tokens, Tensor::host(DType::f32, {3, 2, 4}), wte, Tensor(), 0);
      },
      "dout must be [B, T, C]");
}

}  // namespace
}  // namespace troupe::test
