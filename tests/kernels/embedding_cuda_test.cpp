// CUDA embedding against the CPU backend, in bf16 and f16, whole tables and vocabulary shards.
#include <cstdio>
#include <string>
#include <tuple>

#include "kernels/embedding.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct EmbeddingCase {
  int64_t batch, seq_len, c, vocab, positions, pos_offset;  // positions == 0: no wpe
};

Tensor host_copy(const Tensor& t) {
  Tensor out = Tensor::host(t.dtype(), t.shape());
  copy(cpu(), t, out);
  return out;
}

Tensor minus(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::host(DType::f32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) out.at(i) = a.at(i) - b.at(i);
  return out;
}

// Rows [first, first + rows) of a host table.
Tensor row_block(const Tensor& table, int64_t first, int64_t rows) {
  const int64_t c = table.dim(1);
  return host_copy(table.slice(first * c, {rows, c}));
}

class EmbeddingCuda : public ::testing::TestWithParam<std::tuple<DType, EmbeddingCase>> {};

TEST_P(EmbeddingCuda, MatchesCpu) {
  const auto [t, k] = GetParam();
  const bool with_wpe = k.positions > 0;
  Tensor tokens = random_tokens({k.batch, k.seq_len}, 1, int32_t(k.vocab));
  Tensor wte = round_through(random_normal({k.vocab, k.c}, 2), t);
  Tensor wpe = with_wpe ? round_through(random_normal({k.positions, k.c}, 3), t) : Tensor();
  Tensor dout = round_through(random_normal({k.batch, k.seq_len, k.c}, 4), t);
  Tensor dwte0 = random_normal({k.vocab, k.c}, 5);  // pre-filled gradients: the backward adds
  Tensor dwpe0 = with_wpe ? random_normal({k.positions, k.c}, 6) : Tensor();

  Tensor out_ref = Tensor::host(DType::f32, {k.batch, k.seq_len, k.c});
  embedding_forward(cpu(), tokens, wte, wpe, out_ref, k.pos_offset);
  Tensor dwte_ref = host_copy(dwte0), dwpe_ref = with_wpe ? host_copy(dwpe0) : Tensor();
  embedding_backward(cpu(), tokens, dout, dwte_ref, dwpe_ref, k.pos_offset);

  const Context& g = gpu();
  Tensor tokens_d = Tensor::empty(g, DType::i32, tokens.shape());
  copy(g, tokens, tokens_d);
  Tensor out = Tensor::empty(g, t, out_ref.shape());
  Tensor dwte = to_device(g, dwte0, DType::f32), dwpe = with_wpe ? to_device(g, dwpe0, DType::f32) : Tensor();
  embedding_forward(g, tokens_d, to_device(g, wte, t), with_wpe ? to_device(g, wpe, t) : Tensor(), out, k.pos_offset);
  embedding_backward(g, tokens_d, to_device(g, dout, t), dwte, dwpe, k.pos_offset);

  const double e_out = rel_error(to_host_f32(g, out), out_ref);
  const double e_dwte = rel_error(minus(to_host_f32(g, dwte), dwte0), minus(dwte_ref, dwte0));
  EXPECT_LT(e_out, 1e-2);
  EXPECT_LT(e_dwte, 2e-2);
  double e_dwpe = 0;
  if (with_wpe) {
    e_dwpe = rel_error(minus(to_host_f32(g, dwpe), dwpe0), minus(dwpe_ref, dwpe0));
    EXPECT_LT(e_dwpe, 2e-2);
  }
  std::printf("embedding %s [%lld, %lld, %lld] V=%lld: rel err out %.1e  dwte %.1e  dwpe %.1e\n", dtype_name(t),
              (long long)k.batch, (long long)k.seq_len, (long long)k.c, (long long)k.vocab, e_out, e_dwte, e_dwpe);
}

// GPT-2-like with a position offset; a tiny vocabulary (many repeated tokens racing on the
// same dwte rows) without wpe; a wide row with the whole position table.
INSTANTIATE_TEST_SUITE_P(Cases, EmbeddingCuda,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                                            ::testing::Values(EmbeddingCase{4, 64, 768, 1000, 128, 16},
                                                              EmbeddingCase{3, 37, 1024, 5, 0, 0},
                                                              EmbeddingCase{2, 8, 4096, 100, 8, 0})),
                         [](const auto& info) {
                           const EmbeddingCase k = std::get<1>(info.param);
                           return str_cat(dtype_name(std::get<0>(info.param)), "_", k.batch, "x", k.seq_len, "x", k.c,
                                          "_V", k.vocab);
                         });

// Tensor parallelism: every shard of a 2- and a 4-way split, forward and backward against the
// CPU backend. wpe goes to shard 0 only (as a model passes it), so the other shards' outputs
// are copies of wte rows and zeros: exact.
class EmbeddingShardCuda : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingShardCuda, MatchesCpu) {
  const DType t = GetParam();
  const int64_t batch = 4, seq_len = 64, c = 768, vocab = 1024, positions = 128, offset = 16;
  Tensor tokens = random_tokens({batch, seq_len}, 11, int32_t(vocab));
  Tensor wte = round_through(random_normal({vocab, c}, 12), t);
  Tensor wpe = round_through(random_normal({positions, c}, 13), t);
  Tensor dout = round_through(random_normal({batch, seq_len, c}, 14), t);
  Tensor dwte0 = random_normal({vocab, c}, 15), dwpe0 = random_normal({positions, c}, 16);

  const Context& g = gpu();
  const Tensor tokens_d = to_device(g, tokens, DType::i32), dout_d = to_device(g, dout, t);
  for (int64_t shards : {2, 4}) {
    const int64_t rows = vocab / shards;
    for (int64_t r = 0; r < shards; ++r) {
      SCOPED_TRACE(testing::Message() << "shard " << r << " of " << shards);
      const VocabShard shard{true, r * rows};
      const bool with_wpe = r == 0;
      const Tensor wte_r = row_block(wte, r * rows, rows), dwte0_r = row_block(dwte0, r * rows, rows);

      Tensor out_ref = Tensor::host(DType::f32, {batch, seq_len, c});
      embedding_forward(cpu(), tokens, wte_r, with_wpe ? wpe : Tensor(), out_ref, offset, shard);
      Tensor dwte_ref = host_copy(dwte0_r), dwpe_ref = host_copy(dwpe0);
      embedding_backward(cpu(), tokens, dout, dwte_ref, dwpe_ref, offset, shard);

      Tensor out = Tensor::empty(g, t, out_ref.shape());
      Tensor dwte = to_device(g, dwte0_r, DType::f32), dwpe = to_device(g, dwpe0, DType::f32);
      embedding_forward(g, tokens_d, to_device(g, wte_r, t), with_wpe ? to_device(g, wpe, t) : Tensor(), out, offset,
                        shard);
      embedding_backward(g, tokens_d, dout_d, dwte, dwpe, offset, shard);

      const Tensor out_h = to_host_f32(g, out);
      if (with_wpe)
        EXPECT_LT(rel_error(out_h, out_ref), 1e-2);
      else
        EXPECT_EQ(max_abs_diff(out_h, out_ref), 0.0);
      EXPECT_LT(rel_error(minus(to_host_f32(g, dwte), dwte0_r), minus(dwte_ref, dwte0_r)), 2e-2);
      EXPECT_LT(rel_error(minus(to_host_f32(g, dwpe), dwpe0), minus(dwpe_ref, dwpe0)), 2e-2);
      std::printf("sharded embedding %s from row %lld: rel err out %.1e dwte %.1e dwpe %.1e\n", dtype_name(t),
                  (long long)shard.start, rel_error(out_h, out_ref),
                  rel_error(minus(to_host_f32(g, dwte), dwte0_r), minus(dwte_ref, dwte0_r)),
                  rel_error(minus(to_host_f32(g, dwpe), dwpe0), minus(dwpe_ref, dwpe0)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, EmbeddingShardCuda, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// A shard reads a zero row for any id outside it (negative, another shard's, past the
// vocabulary) and adds no gradient for it.
TEST(EmbeddingCudaEdge, OtherShardsTokensReadZeroRowsAndAddNoGradient) {
  const int64_t rows = 4, c = 16;
  const VocabShard shard{true, 8};  // rows [8, 12)
  Tensor tokens = Tensor::host(DType::i32, {1, 5});
  const int32_t ids[5] = {9, -5, 3, 8 + 4, 11};
  for (int i = 0; i < 5; ++i) tokens.data_as<int32_t>()[i] = ids[i];
  Tensor wte = round_through(random_normal({rows, c}, 17), DType::bf16);
  Tensor dout = round_through(random_normal({1, 5, c}, 18), DType::bf16);

  const Context& g = gpu();
  const Tensor tokens_d = to_device(g, tokens, DType::i32);
  Tensor out = Tensor::empty(g, DType::bf16, {1, 5, c});
  Tensor dwte = Tensor::zeros(g, DType::f32, {rows, c});
  embedding_forward(g, tokens_d, to_device(g, wte, DType::bf16), Tensor(), out, 0, shard);
  embedding_backward(g, tokens_d, to_device(g, dout, DType::bf16), dwte, Tensor(), 0, shard);
  const Tensor out_h = to_host_f32(g, out), dwte_h = to_host_f32(g, dwte);

  const int local[5] = {1, -1, -1, -1, 3};  // -1: not this shard's token
  for (int p = 0; p < 5; ++p)
    for (int64_t j = 0; j < c; ++j)
      EXPECT_EQ(out_h.at(p * c + j), local[p] < 0 ? 0.0f : wte.at(local[p] * c + j)) << "out[" << p << ", " << j << "]";
  for (int64_t v = 0; v < rows; ++v)
    for (int64_t j = 0; j < c; ++j) {
      float want = 0;  // only ids 9 (position 0) and 11 (position 4) add
      if (v == 1) want = dout.at(0 * c + j);
      if (v == 3) want = dout.at(4 * c + j);
      EXPECT_EQ(dwte_h.at(v * c + j), want) << "dwte[" << v << ", " << j << "]";
    }
}

// On the device an id outside [0, V) is not reported: the forward reads the clamped row,
// the backward drops the gradient.
TEST(EmbeddingCudaEdge, OutOfRangeTokensAreClampedForwardAndSkippedBackward) {
  const int64_t vocab = 6, c = 16;
  Tensor tokens = Tensor::host(DType::i32, {1, 4});
  const int32_t ids[4] = {2, -5, 6 + 3, 0};
  for (int i = 0; i < 4; ++i) tokens.data_as<int32_t>()[i] = ids[i];
  Tensor wte = round_through(random_normal({vocab, c}, 7), DType::bf16);
  Tensor dout = round_through(random_normal({1, 4, c}, 8), DType::bf16);

  const Context& g = gpu();
  Tensor tokens_d = Tensor::empty(g, DType::i32, tokens.shape());
  copy(g, tokens, tokens_d);
  Tensor out = Tensor::empty(g, DType::bf16, {1, 4, c});
  Tensor dwte = Tensor::zeros(g, DType::f32, {vocab, c});
  embedding_forward(g, tokens_d, to_device(g, wte, DType::bf16), Tensor(), out, 0);
  embedding_backward(g, tokens_d, to_device(g, dout, DType::bf16), dwte, Tensor(), 0);
  const Tensor out_h = to_host_f32(g, out), dwte_h = to_host_f32(g, dwte);

  const int32_t clamped[4] = {2, 0, int32_t(vocab - 1), 0};
  for (int p = 0; p < 4; ++p)
    for (int64_t j = 0; j < c; ++j)
      EXPECT_EQ(out_h.at(p * c + j), wte.at(clamped[p] * c + j)) << "out[" << p << ", " << j << "]";
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t j = 0; j < c; ++j) {
      float want = 0;  // only the valid ids 2 (position 0) and 0 (position 3) add
      if (v == 2) want = dout.at(0 * c + j);
      if (v == 0) want = dout.at(3 * c + j);
      EXPECT_EQ(dwte_h.at(v * c + j), want) << "dwte[" << v << ", " << j << "]";
    }
}

// The backward is deterministic: many positions of few ids (the case where atomics would add
// in a different order every run) give the same bits twice, and the sums of the CPU (f32).
TEST(EmbeddingCudaEdge, BackwardIsDeterministic) {
  const int64_t batch = 8, seq_len = 512, vocab = 24, c = 64;
  const Tensor tokens = random_tokens({batch, seq_len}, 21, int32_t(vocab));
  const Tensor dout = round_through(random_normal({batch, seq_len, c}, 22), DType::bf16);
  const Context& g = gpu();
  Tensor tokens_d = Tensor::empty(g, DType::i32, tokens.shape());
  copy(g, tokens, tokens_d);
  const Tensor dout_d = to_device(g, dout, DType::bf16);
  Tensor first, second;
  for (Tensor* result : {&first, &second}) {
    Tensor dwte = Tensor::zeros(g, DType::f32, {vocab, c});
    embedding_backward(g, tokens_d, dout_d, dwte, Tensor(), 0);
    *result = to_host_f32(g, dwte);
  }
  EXPECT_EQ(max_abs_diff(first, second), 0.0);
  Tensor ref = Tensor::host(DType::f32, {vocab, c});
  fill_zero(cpu(), ref);
  embedding_backward(cpu(), tokens, dout, ref, Tensor(), 0);
  const double err = rel_error(first, ref);
  std::printf("deterministic dwte vs CPU: rel %.2e\n", err);
  EXPECT_LE(err, 1e-6);
}

}  // namespace
}  // namespace troupe::test
