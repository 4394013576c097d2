// CUDA paged attention against the CPU reference in bf16, f16 and f32: a mixed batch (prefills of
// several tokens, decodes of one) over contexts already in shuffled cache blocks, GQA/MHA,
// head dims 64, 128 and 80, contexts from 1 to several hundred tokens, unbounded and under
// sliding windows (the block-table entries of blocks wholly before a window point at a block of
// other data, so reading one shows). The fused append (paged_append_attention) gives the caches
// and the outputs of append then attention, bit for bit.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/paged_attention.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct CudaPagedCase {
  PagedAttentionConfig cfg;
  std::vector<int32_t> lens;   // context length per sequence (new tokens included)
  std::vector<int32_t> n_new;  // new tokens per sequence
};

class PagedAttentionCuda : public ::testing::TestWithParam<std::tuple<CudaPagedCase, DType>> {};

TEST_P(PagedAttentionCuda, AppendAndAttentionMatchCpu) {
  const auto [c, t] = GetParam();
  const PagedAttentionConfig& cfg = c.cfg;
  const int64_t S = int64_t(c.lens.size()), W = int64_t(cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim;
  int64_t max_blocks = 0, total = 0;
  for (int32_t L : c.lens) {
    max_blocks = std::max<int64_t>(max_blocks, (L + cfg.block_size - 1) / cfg.block_size);
    total += (L + cfg.block_size - 1) / cfg.block_size;
  }
  std::vector<int32_t> ids(size_t(total + 2));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
  std::vector<int32_t> start{0}, slots, tables;
  size_t next = 0;
  for (int64_t s = 0; s < S; ++s) {
    std::vector<int32_t> row(size_t(max_blocks), 0);
    const int32_t first_new = c.lens[size_t(s)] - c.n_new[size_t(s)];
    for (int32_t b = 0; b < (c.lens[size_t(s)] + cfg.block_size - 1) / cfg.block_size; ++b)
      row[size_t(b)] = ids[next++];
    for (int32_t p = first_new; p < c.lens[size_t(s)]; ++p)
      slots.push_back(row[size_t(p / cfg.block_size)] * cfg.block_size + p % cfg.block_size);
    if (cfg.window > 0)  // blocks no new row's window reaches: an unused block instead
      for (int32_t b = 0; b < std::max(0, first_new - cfg.window + 1) / cfg.block_size; ++b)
        row[size_t(b)] = ids.back();
    tables.insert(tables.end(), row.begin(), row.end());
    start.push_back(start.back() + c.n_new[size_t(s)]);
  }
  const int64_t N = start.back(), HD = int64_t(cfg.n_heads) * cfg.head_dim;
  const Shape cache_shape{int64_t(ids.size()), cfg.block_size, cfg.n_kv_heads, cfg.head_dim};
  const Tensor qkv = round_through(random_normal({N, W}, 41), t);
  Tensor k_ref = round_through(random_normal(cache_shape, 42), t);
  Tensor v_ref = round_through(random_normal(cache_shape, 43), t);
  const Tensor slots_h = host_i32(slots, {N});
  const PagedBatch batch_h{host_i32(start, {S + 1}), host_i32(c.lens, {S}), host_i32(tables, {S, max_blocks})};

  Tensor k_d = to_device(gpu(), k_ref, t), v_d = to_device(gpu(), v_ref, t);
  Tensor k_fused = to_device(gpu(), k_ref, t), v_fused = to_device(gpu(), v_ref, t);
  Tensor out_ref = Tensor::host(DType::f32, {N, HD});
  paged_kv_append(cpu(), qkv, cfg, slots_h, k_ref, v_ref);
  paged_attention(cpu(), qkv, cfg, batch_h, k_ref, v_ref, out_ref);

  auto dev = [](const Tensor& h) { return to_device(gpu(), h, DType::i32); };
  const Tensor qkv_d = to_device(gpu(), qkv, t);
  const PagedBatch batch_d{dev(batch_h.query_start), dev(batch_h.seq_lens), dev(batch_h.block_tables)};
  Tensor out_d = Tensor::empty(gpu(), t, {N, HD});
  paged_kv_append(gpu(), qkv_d, cfg, dev(slots_h), k_d, v_d);
  paged_attention(gpu(), qkv_d, cfg, batch_d, k_d, v_d, out_d);
  // The fused append: the new rows' keys read from qkv, the same sums in the same order.
  Tensor out_fused = Tensor::empty(gpu(), t, {N, HD});
  paged_append_attention(gpu(), qkv_d, cfg, dev(slots_h), batch_d, k_fused, v_fused, out_fused);

  const double e_k = max_abs_diff(to_host_f32(gpu(), k_d), k_ref), e_v = max_abs_diff(to_host_f32(gpu(), v_d), v_ref);
  const double e_out = rel_error(to_host_f32(gpu(), out_d), out_ref);
  std::printf("H=%d G=%d D=%d block %d W=%d S=%lld N=%lld %s: max abs err k %.1e v %.1e, rel err out %.2e\n",
              cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.block_size, cfg.window, (long long)S, (long long)N,
              dtype_name(t), e_k, e_v, e_out);
  EXPECT_EQ(e_k, 0.0);  // the append copies values
  EXPECT_EQ(e_v, 0.0);
  EXPECT_LT(e_out, t == DType::f32 ? 1e-5 : 1e-2);  // f32: the same sums in another order
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), k_fused), k_ref), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), v_fused), v_ref), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), out_fused), to_host_f32(gpu(), out_d)), 0.0);
}

const CudaPagedCase kCases[] = {
    {{8, 2, 64, 16}, {1, 37, 300, 16, 5}, {1, 1, 1, 16, 3}},  // decodes, a whole prefill, a chunk
    {{12, 12, 64, 16}, {129, 7}, {1, 7}},                     // GPT-2 heads
    {{12, 12, 64, 16}, std::vector<int32_t>(32, 200), std::vector<int32_t>(32, 1)},  // 32 decodes: 4-warp blocks
    {{12, 12, 64, 16}, std::vector<int32_t>(64, 200), std::vector<int32_t>(64, 1)},  // 64 decodes: 2-warp blocks
    {{1, 1, 8, 16},
     std::vector<int32_t>(65600, 1),
     std::vector<int32_t>(65600, 1)},           // more rows than a grid dimension of 65535
    {{4, 1, 128, 32}, {513, 64}, {2, 64}},      // MQA, D = 128
    {{6, 3, 80, 8}, {3, 90}, {3, 1}},           // D = 80 (lanes partly idle)
    {{4, 2, 36, 16}, {70, 33, 1}, {1, 33, 1}},  // D = 36: rows not 16-byte aligned (scalar K loads)
    // Sliding windows (32 keys per warp tile, 8 warps: 256 keys per round).
    {{8, 2, 64, 16, 0.0f, 100}, {1, 37, 300, 16, 5}, {1, 1, 1, 16, 3}},  // W not a multiple of block or tile
    {{4, 1, 128, 32, 0.0f, 1}, {513, 64}, {2, 64}},                      // MQA, W = 1: out = v
    {{6, 3, 80, 8, 0.0f, 300}, {700, 90}, {5, 40}},                      // W > 256 keys, W > one length
    {{4, 2, 36, 16, 0.0f, 33}, {70, 33, 1}, {1, 33, 1}},                 // scalar path, W = a prefill's length
    {{12, 12, 64, 16, 0.0f, 1024}, {129, 7}, {1, 7}},                    // W longer than every context
};

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionCuda,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(DType::bf16, DType::f16, DType::f32)));

}  // namespace
}  // namespace troupe::test
