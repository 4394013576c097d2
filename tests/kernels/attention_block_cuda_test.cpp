// CUDA block attention (kernels/attention_block.hpp) against the CPU block ops in bf16 and
// f16, on cuDNN's fused attention and on Troupe's warp-per-row kernels (TROUPE_ATTENTION_BACKEND
// flash, and the fallback for head dims cuDNN does not cover): forward of a full and a causal
// block, the merge of a second block into the f32 running out, and the backward of both blocks
// with the merged (final) out and lse into f32 accumulators, the sequence of calls
// model/context_parallel.cpp makes. Then a ring done by hand on one GPU: a sequence cut into
// chunks, every query chunk's blocks merged, equals attention_forward/backward of the whole.
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/attention_block.hpp"
#include "kernels/elementwise.hpp"
#include "tests/kernels/attention_backend.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct BlockCudaCase {
  int64_t B, T;  // T: tokens of each block (Tq = Tk)
  int H, G, D;
  float stddev = 1.0f;  // of q and kv: larger makes the softmax peakier
};

// A host f32 copy of a host f32 tensor (a snapshot before an op changes it in place).
Tensor host_copy(const Tensor& t) {
  Tensor c = Tensor::host(DType::f32, t.shape());
  copy(cpu(), t, c);
  return c;
}

const char* mask_name(BlockMask m) { return m == BlockMask::causal ? "causal" : "full"; }

// A device tensor converted to dtype t (a new tensor).
Tensor converted(const Tensor& x, DType t) {
  Tensor y = Tensor::empty(gpu(), t, x.shape());
  convert(gpu(), x, y);
  return y;
}

// One op sequence of the ring on both devices: block 1 (mask), block 2 (full) merged in, then
// both blocks' backward with the merged out and lse. dq starts at zero and takes both blocks;
// dkv2 starts from random values, so an op that overwrote instead of adding would show.
void check_block_ops(const BlockCudaCase& c, DType t, BlockMask mask, Backend backend) {
  const UseBackend use(backend);
  const AttentionConfig cfg{c.H, c.G, c.D};
  const int64_t HD = int64_t(c.H) * c.D, GD2 = 2 * int64_t(c.G) * c.D;
  const Shape q_shape{c.B, c.T, HD}, kv_shape{c.B, c.T, GD2}, lse_shape{c.B, c.H, c.T};
  const Tensor q = round_through(random_normal(q_shape, 31, c.stddev), t);
  const Tensor kv1 = round_through(random_normal(kv_shape, 32, c.stddev), t);
  const Tensor kv2 = round_through(random_normal(kv_shape, 33, c.stddev), t);
  const Tensor dout = round_through(random_normal(q_shape, 34), t);
  const Tensor dkv2_init = round_through(random_normal(kv_shape, 35, 0.05f), t);

  // CPU, f32.
  Tensor out_ref = Tensor::host(DType::f32, q_shape), lse_ref = Tensor::host(DType::f32, lse_shape);
  Tensor part_ref = Tensor::host(DType::f32, q_shape), part_lse_ref = Tensor::host(DType::f32, lse_shape);
  attention_block_forward(cpu(), q, kv1, cfg, mask, out_ref, lse_ref);
  const Tensor block_out_ref = host_copy(out_ref), block_lse_ref = host_copy(lse_ref);
  attention_block_forward(cpu(), q, kv2, cfg, BlockMask::full, part_ref, part_lse_ref);
  attention_block_merge(cpu(), out_ref, lse_ref, part_ref, part_lse_ref);
  Tensor dq_ref = Tensor::zeros(cpu(), DType::f32, q_shape), dkv1_ref = Tensor::zeros(cpu(), DType::f32, kv_shape);
  Tensor dkv2_ref = host_copy(dkv2_init);
  attention_block_backward(cpu(), dout, q, kv1, out_ref, lse_ref, cfg, mask, dq_ref, dkv1_ref);
  attention_block_backward(cpu(), dout, q, kv2, out_ref, lse_ref, cfg, BlockMask::full, dq_ref, dkv2_ref);

  // CUDA, the same calls: the running out and the accumulators in f32, the final out rounded
  // to t for the backward (as model/context_parallel.cpp does).
  const Tensor q_d = to_device(gpu(), q, t), kv1_d = to_device(gpu(), kv1, t), kv2_d = to_device(gpu(), kv2, t);
  const Tensor dout_d = to_device(gpu(), dout, t);
  Tensor part_d = Tensor::empty(gpu(), t, q_shape), part_lse_d = Tensor::empty(gpu(), DType::f32, lse_shape);
  Tensor lse_d = Tensor::empty(gpu(), DType::f32, lse_shape);
  attention_block_forward(gpu(), q_d, kv1_d, cfg, mask, part_d, lse_d);
  const Tensor block_out = to_host_f32(gpu(), part_d), block_lse = to_host_f32(gpu(), lse_d);
  const Tensor acc_d = converted(part_d, DType::f32);
  attention_block_forward(gpu(), q_d, kv2_d, cfg, BlockMask::full, part_d, part_lse_d);
  attention_block_merge(gpu(), acc_d, lse_d, part_d, part_lse_d);
  const Tensor out_d = converted(acc_d, t);
  Tensor dq_d = Tensor::zeros(gpu(), DType::f32, q_shape), dkv1_d = Tensor::zeros(gpu(), DType::f32, kv_shape);
  Tensor dkv2_d = to_device(gpu(), dkv2_init, DType::f32);
  attention_block_backward(gpu(), dout_d, q_d, kv1_d, out_d, lse_d, cfg, mask, dq_d, dkv1_d);
  attention_block_backward(gpu(), dout_d, q_d, kv2_d, out_d, lse_d, cfg, BlockMask::full, dq_d, dkv2_d);

  const double e_block = rel_error(block_out, block_out_ref), e_block_lse = rel_error(block_lse, block_lse_ref);
  const double e_out = rel_error(to_host_f32(gpu(), acc_d), out_ref);
  const double e_lse = rel_error(to_host_f32(gpu(), lse_d), lse_ref);
  const double e_dq = rel_error(to_host_f32(gpu(), dq_d), dq_ref);
  const double e_dkv1 = rel_error(to_host_f32(gpu(), dkv1_d), dkv1_ref);
  const double e_dkv2 = rel_error(to_host_f32(gpu(), dkv2_d), dkv2_ref);
  std::printf(
      "block B=%lld T=%lld H=%d G=%d D=%d %s %s %s: rel err block out %.2e lse %.2e | merged out %.2e lse %.2e | "
      "dq %.2e dkv1 %.2e dkv2(+=) %.2e\n",
      (long long)c.B, (long long)c.T, c.H, c.G, c.D, mask_name(mask), dtype_name(t), backend_name(backend), e_block,
      e_block_lse, e_out, e_lse, e_dq, e_dkv1, e_dkv2);
  EXPECT_LT(e_block, 2e-2);
  EXPECT_LT(e_block_lse, 2e-3);  // lse is f32 from f32 scores: natural log of the scaled scores' exp sum
  EXPECT_LT(e_out, 2e-2);
  EXPECT_LT(e_lse, 2e-3);
  EXPECT_LT(e_dq, 2e-2);
  EXPECT_LT(e_dkv1, 2e-2);
  EXPECT_LT(e_dkv2, 2e-2);
}

std::string case_name(const BlockCudaCase& c, DType t, BlockMask m, Backend b) {
  return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "H" + std::to_string(c.H) + "G" + std::to_string(c.G) +
         "D" + std::to_string(c.D) + "_" + mask_name(m) + "_" + dtype_name(t) + "_" + backend_name(b);
}

class AttentionBlockCuda : public ::testing::TestWithParam<std::tuple<BlockCudaCase, DType, BlockMask, Backend>> {};

TEST_P(AttentionBlockCuda, OpsMatchCpu) {
  const auto [c, t, m, b] = GetParam();
  check_block_ops(c, t, m, b);
}

// cuDNN covers head dims 64 and 128 (the D = 80 case runs the warp-per-row kernels on either
// backend); blocks up to 1024 tokens, the length a CP2 ring cuts a 4K sequence into.
const BlockCudaCase kCases[] = {
    {2, 128, 4, 4, 64},          // MHA
    {1, 256, 8, 2, 128},         // GQA
    {1, 512, 8, 2, 64, 2.0f},    // GQA, long block, peaky softmax
    {1, 384, 6, 1, 128, 1.5f},   // multi-query
    {1, 1024, 8, 2, 128, 1.5f},  // GQA, the longest block
    {2, 96, 4, 2, 80},           // a head dim cuDNN does not cover: the fallback kernels
};

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBlockCuda,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(DType::bf16, DType::f16),
                                            ::testing::Values(BlockMask::full, BlockMask::causal),
                                            ::testing::Values(Backend::cudnn, Backend::flash)),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param),
                                            std::get<3>(info.param));
                         });

// Host f32 [B, Tc, n]: columns [col, col + n) of chunk c's rows of a host [B, T, w] tensor
// (Tc = T / chunks); `back` writes part into them instead.
void chunk_columns(const Tensor& whole, int chunks, int c, int64_t col, const Tensor& part, bool back) {
  const int64_t B = whole.dim(0), T = whole.dim(1), w = whole.dim(2), Tc = T / chunks, n = part.dim(2);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tc; ++t)
      for (int64_t i = 0; i < n; ++i) {
        float& a = whole.data_as<float>()[(b * T + c * Tc + t) * w + col + i];
        float& p = part.data_as<float>()[(b * Tc + t) * n + i];
        if (back)
          a = p;
        else
          p = a;
      }
}
// Chunk c's entries of a host lse [B, H, T] <- part [B, H, Tc].
void chunk_lse_back(const Tensor& whole, int chunks, int c, const Tensor& part) {
  const int64_t BH = whole.dim(0) * whole.dim(1), T = whole.dim(2), Tc = T / chunks;
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t t = 0; t < Tc; ++t) whole.data_as<float>()[bh * T + c * Tc + t] = part.data_as<float>()[bh * Tc + t];
}

// The ring by hand: query chunk i's diagonal block (causal) first, then chunks i-1 .. 0 (full)
// merged in, as the ring delivers them; then every block's backward with the final out and lse.
void check_ring_by_hand(const BlockCudaCase& c, int chunks, DType t, Backend backend) {
  const UseBackend use(backend);
  const AttentionConfig cfg{c.H, c.G, c.D};
  const int64_t T = c.T * chunks, Tc = c.T, HD = int64_t(c.H) * c.D, GD2 = 2 * int64_t(c.G) * c.D;
  const Shape qkv_shape{c.B, T, HD + GD2}, out_shape{c.B, T, HD}, lse_shape{c.B, c.H, T};
  const Tensor qkv = round_through(random_normal(qkv_shape, 41, c.stddev), t);
  const Tensor dout = round_through(random_normal(out_shape, 42), t);

  // The whole sequence: CPU f32 and the CUDA attention (flash or cuDNN).
  Tensor out_cpu = Tensor::host(DType::f32, out_shape), lse_cpu = Tensor::host(DType::f32, lse_shape);
  Tensor dqkv_cpu = Tensor::host(DType::f32, qkv_shape);
  attention_forward(cpu(), qkv, cfg, out_cpu, lse_cpu);
  attention_backward(cpu(), dout, qkv, out_cpu, lse_cpu, cfg, dqkv_cpu);
  const Tensor qkv_d = to_device(gpu(), qkv, t), dout_d = to_device(gpu(), dout, t);
  Tensor out_whole_d = Tensor::empty(gpu(), t, out_shape), lse_whole_d = Tensor::empty(gpu(), DType::f32, lse_shape);
  Tensor dqkv_whole_d = Tensor::empty(gpu(), t, qkv_shape);
  attention_forward(gpu(), qkv_d, cfg, out_whole_d, lse_whole_d);
  attention_backward(gpu(), dout_d, qkv_d, out_whole_d, lse_whole_d, cfg, dqkv_whole_d);
  const Tensor out_whole = to_host_f32(gpu(), out_whole_d), lse_whole = to_host_f32(gpu(), lse_whole_d);
  const Tensor dqkv_whole = to_host_f32(gpu(), dqkv_whole_d);

  // The chunks on the GPU.
  std::vector<Tensor> q, kv, dy, dkv;
  for (int i = 0; i < chunks; ++i) {
    Tensor qh = Tensor::host(DType::f32, {c.B, Tc, HD}), kvh = Tensor::host(DType::f32, {c.B, Tc, GD2});
    Tensor dyh = Tensor::host(DType::f32, {c.B, Tc, HD});
    chunk_columns(qkv, chunks, i, 0, qh, false);
    chunk_columns(qkv, chunks, i, HD, kvh, false);
    chunk_columns(dout, chunks, i, 0, dyh, false);
    q.push_back(to_device(gpu(), qh, t));
    kv.push_back(to_device(gpu(), kvh, t));
    dy.push_back(to_device(gpu(), dyh, t));
    dkv.push_back(Tensor::zeros(gpu(), DType::f32, {c.B, Tc, GD2}));
  }
  Tensor out = Tensor::host(DType::f32, out_shape), lse = Tensor::host(DType::f32, lse_shape);
  Tensor dqkv = Tensor::host(DType::f32, qkv_shape);
  Tensor part = Tensor::empty(gpu(), t, {c.B, Tc, HD}), part_lse = Tensor::empty(gpu(), DType::f32, {c.B, c.H, Tc});
  for (int i = 0; i < chunks; ++i) {
    Tensor l = Tensor::empty(gpu(), DType::f32, {c.B, c.H, Tc});
    attention_block_forward(gpu(), q[size_t(i)], kv[size_t(i)], cfg, BlockMask::causal, part, l);
    const Tensor acc = converted(part, DType::f32);
    for (int j = i - 1; j >= 0; --j) {
      attention_block_forward(gpu(), q[size_t(i)], kv[size_t(j)], cfg, BlockMask::full, part, part_lse);
      attention_block_merge(gpu(), acc, l, part, part_lse);
    }
    const Tensor o = converted(acc, t);
    Tensor dq = Tensor::zeros(gpu(), DType::f32, {c.B, Tc, HD});
    for (int j = i; j >= 0; --j)
      attention_block_backward(gpu(), dy[size_t(i)], q[size_t(i)], kv[size_t(j)], o, l, cfg,
                               j == i ? BlockMask::causal : BlockMask::full, dq, dkv[size_t(j)]);
    chunk_columns(out, chunks, i, 0, to_host_f32(gpu(), o), true);
    chunk_lse_back(lse, chunks, i, to_host_f32(gpu(), l));
    chunk_columns(dqkv, chunks, i, 0, to_host_f32(gpu(), dq), true);
  }
  for (int i = 0; i < chunks; ++i) chunk_columns(dqkv, chunks, i, HD, to_host_f32(gpu(), dkv[size_t(i)]), true);

  const double e_out = rel_error(out, out_whole), e_lse = rel_error(lse, lse_whole);
  const double e_dqkv = rel_error(dqkv, dqkv_whole);
  const double c_out = rel_error(out, out_cpu), c_lse = rel_error(lse, lse_cpu), c_dqkv = rel_error(dqkv, dqkv_cpu);
  std::printf(
      "ring of %d chunks, B=%lld T=%lld H=%d G=%d D=%d %s %s: rel err vs CUDA whole-sequence attention: out %.2e "
      "lse %.2e dqkv %.2e | vs CPU f32: out %.2e lse %.2e dqkv %.2e\n",
      chunks, (long long)c.B, (long long)T, c.H, c.G, c.D, dtype_name(t), backend_name(backend), e_out, e_lse, e_dqkv,
      c_out, c_lse, c_dqkv);
  EXPECT_LT(e_out, 2e-2);
  EXPECT_LT(e_lse, 2e-3);
  EXPECT_LT(e_dqkv, 3e-2);  // both sides carry bf16/f16 rounding
  EXPECT_LT(c_out, 2e-2);
  EXPECT_LT(c_lse, 2e-3);
  EXPECT_LT(c_dqkv, 3e-2);
}

// C = 2 as the ring cuts it: 2C = 4 chunks; C = 4: 8 chunks.
TEST(AttentionBlockCudaRing, TwoRanksByHandEqualWholeSequenceBf16) {
  for (Backend b : {Backend::cudnn, Backend::flash}) {
    check_ring_by_hand({2, 128, 8, 2, 64}, 4, DType::bf16, b);
    check_ring_by_hand({1, 256, 4, 4, 128}, 4, DType::bf16, b);
  }
}

TEST(AttentionBlockCudaRing, TwoRanksByHandEqualWholeSequenceF16) {
  for (Backend b : {Backend::cudnn, Backend::flash}) check_ring_by_hand({1, 128, 8, 1, 128}, 4, DType::f16, b);
}

TEST(AttentionBlockCudaRing, FourRanksByHandEqualWholeSequenceCudnn) {
  check_ring_by_hand({1, 256, 8, 2, 128}, 8, DType::bf16, Backend::cudnn);
}

TEST(AttentionBlockCuda, RefusesF32ActivationsBf16AccumulatorsAndSlidingWindow) {
  const AttentionConfig cfg{2, 1, 64};
  const Tensor q32 = Tensor::zeros(gpu(), DType::f32, {1, 4, 128}),
               kv32 = Tensor::zeros(gpu(), DType::f32, {1, 4, 128});
  Tensor out32 = Tensor::empty(gpu(), DType::f32, {1, 4, 128}), lse = Tensor::empty(gpu(), DType::f32, {1, 2, 4});
  EXPECT_THROW(attention_block_forward(gpu(), q32, kv32, cfg, BlockMask::full, out32, lse), Error);
  const Tensor q = Tensor::zeros(gpu(), DType::bf16, {1, 4, 128}), kv = Tensor::zeros(gpu(), DType::bf16, {1, 4, 128});
  Tensor out = Tensor::empty(gpu(), DType::bf16, {1, 4, 128});
  AttentionConfig windowed = cfg;
  windowed.window = 2;
  EXPECT_THROW(attention_block_forward(gpu(), q, kv, windowed, BlockMask::full, out, lse), Error);
  EXPECT_NO_THROW(attention_block_forward(gpu(), q, kv, cfg, BlockMask::full, out, lse));
  // The accumulators are f32: a bf16 running out, dq or dkv is refused.
  EXPECT_THROW(attention_block_merge(gpu(), out, lse, out, lse), Error);
  Tensor dq = Tensor::zeros(gpu(), DType::f32, {1, 4, 128}), dkv = Tensor::zeros(gpu(), DType::f32, {1, 4, 128});
  const Tensor dq16 = Tensor::zeros(gpu(), DType::bf16, {1, 4, 128});
  EXPECT_THROW(attention_block_backward(gpu(), out, q, kv, out, lse, cfg, BlockMask::full, dq16, dkv), Error);
  EXPECT_NO_THROW(attention_block_backward(gpu(), out, q, kv, out, lse, cfg, BlockMask::full, dq, dkv));
}

}  // namespace
}  // namespace troupe::test
