// Block attention (kernels/attention_block.hpp): a sequence cut into chunks, each query chunk
// attending its diagonal block (causal) and every earlier chunk (full), merged, equals the
// whole-sequence attention_forward; the blocks' backward with the final out and lse sums to
// attention_backward.
#include <cmath>
#include <vector>

#include "base/check.hpp"
#include "kernels/attention_block.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct BlockCase {
  int64_t B, T;
  int H, G, D;
  int chunks;  // divides T
};

// Chunk c's query heads [B, Tc, H*D] (part 0) or keys and values [B, Tc, 2*G*D] (part 1) of
// qkv [B, T, (H+2G)*D]; `back` writes src into that part of qkv instead.
void chunk_part(const BlockCase& k, const Tensor& qkv, int c, bool kv, const Tensor& part, bool back) {
  const int64_t Tc = k.T / k.chunks, W = int64_t(k.H + 2 * k.G) * k.D;
  const int64_t col = kv ? int64_t(k.H) * k.D : 0, n = part.dim(2);
  float* x = qkv.data_as<float>();
  float* p = part.data_as<float>();
  for (int64_t b = 0; b < k.B; ++b)
    for (int64_t t = 0; t < Tc; ++t)
      for (int64_t i = 0; i < n; ++i) {
        float& whole = x[(b * k.T + c * Tc + t) * W + col + i];
        float& mine = p[(b * Tc + t) * n + i];
        if (back)
          whole = mine;
        else
          mine = whole;
      }
}

// Rows of chunk c of a [B, T, w] tensor (out) or of an lse [B, H, T] (lse = true).
void chunk_rows(const BlockCase& k, const Tensor& whole, int c, const Tensor& part, bool lse, bool back) {
  const int64_t Tc = k.T / k.chunks;
  const int64_t outer = lse ? k.B * k.H : k.B, w = lse ? 1 : whole.dim(2);
  float* x = whole.data_as<float>();
  float* p = part.data_as<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t t = 0; t < Tc; ++t)
      for (int64_t i = 0; i < w; ++i) {
        float& a = x[(o * k.T + c * Tc + t) * w + i];
        float& m = p[(o * Tc + t) * w + i];
        if (back)
          a = m;
        else
          m = a;
      }
}

class AttentionBlocks : public ::testing::TestWithParam<BlockCase> {};

TEST_P(AttentionBlocks, MergedBlocksEqualWholeSequence) {
  const BlockCase k = GetParam();
  const AttentionConfig cfg{k.H, k.G, k.D};
  const int64_t Tc = k.T / k.chunks, HD = int64_t(k.H) * k.D, GD2 = 2 * int64_t(k.G) * k.D;
  const Tensor qkv = random_normal({k.B, k.T, HD + GD2}, 3, 1.5f);
  const Tensor dout = random_normal({k.B, k.T, HD}, 4);
  Tensor out_ref = Tensor::host(DType::f32, {k.B, k.T, HD}), lse_ref = Tensor::host(DType::f32, {k.B, k.H, k.T});
  Tensor dqkv_ref = Tensor::host(DType::f32, qkv.shape());
  attention_forward(cpu(), qkv, cfg, out_ref, lse_ref);
  attention_backward(cpu(), dout, qkv, out_ref, lse_ref, cfg, dqkv_ref);

  std::vector<Tensor> q, kv;
  for (int c = 0; c < k.chunks; ++c) {
    q.push_back(Tensor::host(DType::f32, {k.B, Tc, HD}));
    kv.push_back(Tensor::host(DType::f32, {k.B, Tc, GD2}));
    chunk_part(k, qkv, c, false, q.back(), false);
    chunk_part(k, qkv, c, true, kv.back(), false);
  }
  Tensor out = Tensor::host(DType::f32, out_ref.shape()), lse = Tensor::host(DType::f32, lse_ref.shape());
  Tensor dqkv = Tensor::zeros(cpu(), DType::f32, qkv.shape());
  std::vector<Tensor> dkv;
  for (int c = 0; c < k.chunks; ++c) dkv.push_back(Tensor::zeros(cpu(), DType::f32, {k.B, Tc, GD2}));
  for (int i = 0; i < k.chunks; ++i) {
    // Query chunk i: the diagonal block first, then the earlier chunks from the nearest back
    // (the order the ring delivers them in), merged.
    Tensor o = Tensor::host(DType::f32, {k.B, Tc, HD}), l = Tensor::host(DType::f32, {k.B, k.H, Tc});
    Tensor part = Tensor::host(DType::f32, o.shape()), part_lse = Tensor::host(DType::f32, l.shape());
    attention_block_forward(cpu(), q[size_t(i)], kv[size_t(i)], cfg, BlockMask::causal, o, l);
    for (int j = i - 1; j >= 0; --j) {
      attention_block_forward(cpu(), q[size_t(i)], kv[size_t(j)], cfg, BlockMask::full, part, part_lse);
      attention_block_merge(cpu(), o, l, part, part_lse);
    }
    chunk_rows(k, out, i, o, false, true);
    chunk_rows(k, lse, i, l, true, true);
    // Backward of every block of query chunk i with the final out and lse.
    Tensor dy = Tensor::host(DType::f32, o.shape()), dq = Tensor::zeros(cpu(), DType::f32, o.shape());
    chunk_rows(k, dout, i, dy, false, false);
    for (int j = i; j >= 0; --j)
      attention_block_backward(cpu(), dy, q[size_t(i)], kv[size_t(j)], o, l, cfg,
                               j == i ? BlockMask::causal : BlockMask::full, dq, dkv[size_t(j)]);
    chunk_part(k, dqkv, i, false, dq, true);
  }
  for (int c = 0; c < k.chunks; ++c) chunk_part(k, dqkv, c, true, dkv[size_t(c)], true);
  EXPECT_LT(rel_error(out, out_ref), 1e-5);
  EXPECT_LT(max_abs_diff(lse, lse_ref), 1e-5);
  EXPECT_LT(rel_error(dqkv, dqkv_ref), 1e-5);
}

// GQA (H=4, G=2), MQA, MHA; D from 8 to 16; 2, 4 and 8 chunks (one token each).
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBlocks,
                         ::testing::Values(BlockCase{2, 12, 4, 2, 8, 2}, BlockCase{1, 16, 4, 1, 16, 4},
                                           BlockCase{2, 8, 3, 3, 12, 8}, BlockCase{1, 12, 2, 2, 8, 1}));

TEST(AttentionBlock, MergeWithEmptyRunningOutputCopiesTheBlock) {
  const Tensor part = random_normal({1, 3, 8}, 5), part_lse = random_normal({1, 2, 3}, 6);
  Tensor out = Tensor::zeros(cpu(), DType::f32, {1, 3, 8}), lse = Tensor::host(DType::f32, {1, 2, 3});
  for (int64_t i = 0; i < lse.numel(); ++i) lse.data_as<float>()[i] = -INFINITY;
  attention_block_merge(cpu(), out, lse, part, part_lse);
  EXPECT_EQ(max_abs_diff(out, part), 0.0);
  EXPECT_EQ(max_abs_diff(lse, part_lse), 0.0);
}

TEST(AttentionBlock, RefusesSlidingWindowAndUnequalDiagonal) {
  const Tensor q = random_normal({1, 4, 16}, 1), kv = random_normal({1, 4, 16}, 2);
  Tensor out = Tensor::host(DType::f32, {1, 4, 16}), lse = Tensor::host(DType::f32, {1, 2, 4});
  AttentionConfig cfg{2, 1, 8};
  cfg.window = 2;
  EXPECT_THROW(attention_block_forward(cpu(), q, kv, cfg, BlockMask::full, out, lse), Error);
  cfg.window = 0;
  const Tensor kv3 = random_normal({1, 3, 16}, 2);
  EXPECT_THROW(attention_block_forward(cpu(), q, kv3, cfg, BlockMask::causal, out, lse), Error);
  EXPECT_NO_THROW(attention_block_forward(cpu(), q, kv3, cfg, BlockMask::full, out, lse));
}

}  // namespace
}  // namespace troupe::test
