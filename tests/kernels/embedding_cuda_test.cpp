// CUDA embedding against the CPU backend, in bf16 and f16.
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
INSTANTIATE_TEST_SUITE_P(
    Cases, EmbeddingCuda,
    ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                       ::testing::Values(EmbeddingCase{4, 64, 768, 1000, 128, 16}, EmbeddingCase{3, 37, 1024, 5, 0, 0},
                                         EmbeddingCase{2, 8, 4096, 100, 8, 0})),
    [](const auto& info) {
      const EmbeddingCase k = std::get<1>(info.param);
      return str_cat(dtype_name(std::get<0>(info.param)), "_", k.batch, "x", k.seq_len, "x", k.c, "_V", k.vocab);
    });

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

}  // namespace
}  // namespace troupe::test
