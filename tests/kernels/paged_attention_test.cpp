// CPU paged attention against a dense reference with an explicit causal (or sliding-window)
// mask on the same data: sequences of different lengths in shuffled cache blocks, a
// whole-prompt prefill, then the rest in mixed steps (some sequences a few tokens, others one),
// GQA and MHA, windows shorter and longer than the sequences.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/paged_attention.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Dense attention of qkv [1, L, (H + 2G) D] -> [1, L, H D] in f64 through the full L x L
// score matrix: row i sees key j iff j <= i and, under a window, i - window < j.
Tensor masked_reference(const Tensor& qkv, const PagedAttentionConfig& cfg) {
  const int64_t L = qkv.dim(1), width = qkv.dim(2);
  const int H = cfg.n_heads, G = cfg.n_kv_heads, D = cfg.head_dim;
  const double scale = cfg.scale != 0.0f ? cfg.scale : 1.0 / std::sqrt(double(D));
  auto head = [&](int64_t t, int slot) { return qkv.data_as<float>() + t * width + int64_t(slot) * D; };
  Tensor out = Tensor::host(DType::f32, {1, L, int64_t(H) * D});
  std::vector<double> p(static_cast<size_t>(L));
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / G);
    for (int64_t i = 0; i < L; ++i) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < L; ++j) {
        double d = 0;
        for (int k = 0; k < D; ++k) d += double(head(i, h)[k]) * head(j, H + g)[k];
        p[size_t(j)] = j <= i && (cfg.window == 0 || j > i - cfg.window) ? d * scale : -INFINITY;
        m = std::max(m, p[size_t(j)]);
      }
      for (int64_t j = 0; j < L; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - m);
      for (int k = 0; k < D; ++k) {
        double o = 0;
        for (int64_t j = 0; j < L; ++j) o += p[size_t(j)] / sum * head(j, H + G + g)[k];
        out.at((i * H + h) * D + k) = float(o);
      }
    }
  }
  return out;
}

// S sequences, each with its dense qkv [1, L, W], its dense attention output and its blocks.
struct PagedFixture {
  PagedAttentionConfig cfg;
  std::vector<int64_t> lengths;
  std::vector<Tensor> qkv, ref;
  std::vector<std::vector<int32_t>> blocks;
  Tensor k_cache, v_cache;
  int64_t max_blocks = 0;

  PagedFixture(PagedAttentionConfig c, std::vector<int64_t> lens) : cfg(c), lengths(std::move(lens)) {
    const int64_t W = int64_t(cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim;
    int64_t total_blocks = 0;
    for (int64_t L : lengths) {
      max_blocks = std::max(max_blocks, (L + cfg.block_size - 1) / cfg.block_size);
      total_blocks += (L + cfg.block_size - 1) / cfg.block_size;
    }
    std::vector<int32_t> ids(size_t(total_blocks + 3));  // a few blocks no one uses
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
    size_t next = 0;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int64_t L = lengths[s];
      qkv.push_back(random_normal({1, L, W}, 100 + s));
      ref.push_back(masked_reference(qkv.back(), cfg));
      blocks.emplace_back();
      for (int64_t b = 0; b < (L + cfg.block_size - 1) / cfg.block_size; ++b) blocks.back().push_back(ids[next++]);
    }
    const Shape cache{int64_t(ids.size()), cfg.block_size, cfg.n_kv_heads, cfg.head_dim};
    k_cache = random_normal(cache, 1);  // garbage where nothing was appended
    v_cache = random_normal(cache, 2);
  }

  // Runs one step: sequence s gets its tokens [done[s], done[s] + take[s]) as new rows.
  // Returns the max relative error of the rows against the dense reference. With drop_window
  // W > 0, the block-table entries of blocks wholly before the W-window of each sequence's
  // first new row are -1 (as if a server had freed them). fused: one paged_append_attention.
  double step(std::vector<int64_t>& done, const std::vector<int64_t>& take, int drop_window = 0, bool fused = false) {
    const int64_t W = qkv[0].dim(2), HD = int64_t(cfg.n_heads) * cfg.head_dim;
    std::vector<int32_t> start{0}, lens, slots, tables;
    std::vector<float> rows;
    for (size_t s = 0; s < lengths.size(); ++s) {
      for (int64_t t = done[s]; t < done[s] + take[s]; ++t) {
        rows.insert(rows.end(), qkv[s].data_as<float>() + t * W, qkv[s].data_as<float>() + (t + 1) * W);
        slots.push_back(blocks[s][size_t(t / cfg.block_size)] * cfg.block_size + int32_t(t % cfg.block_size));
      }
      start.push_back(start.back() + int32_t(take[s]));
      lens.push_back(int32_t(done[s] + take[s]));
      std::vector<int32_t> row(size_t(max_blocks), -1);
      std::copy(blocks[s].begin(), blocks[s].end(), row.begin());
      if (drop_window > 0) {
        const int64_t first_seen = std::max<int64_t>(0, done[s] - drop_window + 1);
        std::fill(row.begin(), row.begin() + first_seen / cfg.block_size, -1);
      }
      tables.insert(tables.end(), row.begin(), row.end());
    }
    const int64_t N = start.back(), S = int64_t(lengths.size());
    const Tensor x = Tensor::host_f32({N, W}, rows);
    Tensor out = Tensor::host(DType::f32, {N, HD});
    const PagedBatch batch{host_i32(start, {S + 1}), host_i32(lens, {S}), host_i32(tables, {S, max_blocks})};
    if (fused) {
      paged_append_attention(cpu(), x, cfg, host_i32(slots, {N}), batch, k_cache, v_cache, out);
    } else {
      paged_kv_append(cpu(), x, cfg, host_i32(slots, {N}), k_cache, v_cache);
      paged_attention(cpu(), x, cfg, batch, k_cache, v_cache, out);
    }
    double worst = 0;
    for (size_t s = 0; s < lengths.size(); ++s) {
      if (take[s] == 0) continue;
      const Tensor got = out.slice(start[s] * HD, {take[s], HD});
      const Tensor want = ref[s].slice(done[s] * HD, {take[s], HD});
      worst = std::max(worst, rel_error(got, want));
      done[s] += take[s];
    }
    return worst;
  }
};

struct PagedCase {
  PagedAttentionConfig cfg;
  std::vector<int64_t> lengths;
};

class PagedAttention : public ::testing::TestWithParam<PagedCase> {};

TEST_P(PagedAttention, WholePrefillMatchesDense) {
  PagedFixture f(GetParam().cfg, GetParam().lengths);
  std::vector<int64_t> done(f.lengths.size(), 0);
  const double err = f.step(done, f.lengths);
  std::printf("prefill: max rel err %.2e\n", err);
  EXPECT_LT(err, 1e-5);
}

// Prefill then mixed steps, appending apart (fused = false) or in paged_append_attention.
double prefill_then_mixed_steps(const PagedCase& c, bool fused) {
  PagedFixture f(c.cfg, c.lengths);
  const size_t S = f.lengths.size();
  std::vector<int64_t> done(S, 0), take(S);
  for (size_t s = 0; s < S; ++s) take[s] = f.lengths[s] / 2;
  double worst = f.step(done, take, 0, fused);
  auto unfinished = [&] {
    for (size_t s = 0; s < S; ++s)
      if (done[s] < f.lengths[s]) return true;
    return false;
  };
  for (int step = 0; unfinished(); ++step) {
    // Sequence s takes 1 token (decode) or, every third step for odd s, up to 3 (a prefill chunk).
    for (size_t s = 0; s < S; ++s)
      take[s] = std::min<int64_t>(f.lengths[s] - done[s], (s % 2 == 1 && step % 3 == 0) ? 3 : 1);
    worst = std::max(worst, f.step(done, take, 0, fused));
  }
  std::printf("mixed steps%s: max rel err %.2e\n", fused ? " (fused append)" : "", worst);
  return worst;
}

TEST_P(PagedAttention, PrefillThenMixedStepsMatchDense) {
  EXPECT_LT(prefill_then_mixed_steps(GetParam(), false), 1e-5);
}

TEST_P(PagedAttention, FusedAppendMatchesDense) { EXPECT_LT(prefill_then_mixed_steps(GetParam(), true), 1e-5); }

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttention,
                         ::testing::Values(PagedCase{{4, 2, 16, 4}, {5, 17, 1, 33}},  // GQA, block 4
                                           PagedCase{{3, 3, 8, 16}, {40, 2, 16}},     // MHA, block 16
                                           PagedCase{{8, 1, 32, 8}, {9, 24}}));       // MQA
INSTANTIATE_TEST_SUITE_P(
    Windows, PagedAttention,
    ::testing::Values(PagedCase{{4, 2, 16, 4, 0.0f, 5}, {5, 17, 1, 33}},  // GQA, W not a multiple of the block
                      PagedCase{{3, 3, 8, 16, 0.0f, 16}, {40, 2, 16}},    // MHA, W = block, = one length
                      PagedCase{{8, 1, 32, 8, 0.0f, 1}, {9, 24}},         // MQA, W = 1
                      PagedCase{{4, 2, 16, 4, 0.0f, 40}, {5, 17, 1, 33}}  // W longer than every sequence
                      ));

TEST(PagedAttentionWindow, BlocksBeforeTheWindowAreNotRead) {
  // Decode steps of long sequences under W = 6 with block 4, their early block-table entries
  // -1: the CPU checks every block it reads, so reading one would throw.
  PagedFixture f({4, 2, 16, 4, 0.0f, 6}, {30, 19});
  std::vector<int64_t> done{0, 0}, take(2);
  double worst = f.step(done, {20, 3});
  while (done[0] < 30 || done[1] < 19) {
    for (size_t s = 0; s < 2; ++s) take[s] = done[s] < f.lengths[s] ? 1 : 0;
    worst = std::max(worst, f.step(done, take, /*drop_window=*/6));
  }
  std::printf("decode with dropped blocks: max rel err %.2e\n", worst);
  EXPECT_LT(worst, 1e-5);
  // Without a window the same tables are an error (so the check above would catch a read).
  PagedFixture g({4, 2, 16, 4}, {30, 19});
  std::vector<int64_t> g_done{0, 0};
  g.step(g_done, {20, 3});
  EXPECT_THROW(g.step(g_done, {1, 1}, /*drop_window=*/6), Error);
}

TEST(PagedAttentionChecks, BadArgumentsAreErrors) {
  const PagedAttentionConfig cfg{2, 1, 4, 4};
  Tensor qkv = Tensor::host(DType::f32, {2, 16});
  Tensor k = Tensor::host(DType::f32, {3, 4, 1, 4}), v = Tensor::host(DType::f32, {3, 4, 1, 4});
  EXPECT_THROW(paged_kv_append(cpu(), qkv, cfg, host_i32({0, 12}, {2}), k, v), Error);  // slot 12 of 12
  EXPECT_NO_THROW(paged_kv_append(cpu(), qkv, cfg, host_i32({0, 11}, {2}), k, v));
  Tensor out = Tensor::host(DType::f32, {2, 8});
  const PagedBatch bad_block{host_i32({0, 2}, {2}), host_i32({2}, {1}), host_i32({5}, {1, 1})};
  EXPECT_THROW(paged_attention(cpu(), qkv, cfg, bad_block, k, v, out), Error);
  const PagedBatch too_long{host_i32({0, 2}, {2}), host_i32({5}, {1}), host_i32({0}, {1, 1})};
  EXPECT_THROW(paged_attention(cpu(), qkv, cfg, too_long, k, v, out), Error);
  EXPECT_THROW(paged_attention(cpu(), qkv, {2, 1, 4, 2}, too_long, k, v, out), Error);  // cache shape
  const PagedBatch ok{host_i32({0, 2}, {2}), host_i32({2}, {1}), host_i32({0}, {1, 1})};
  EXPECT_NO_THROW(paged_attention(cpu(), qkv, {2, 1, 4, 4, 0.0f, 1}, ok, k, v, out));
  EXPECT_THROW(paged_attention(cpu(), qkv, {2, 1, 4, 4, 0.0f, -1}, ok, k, v, out), Error);  // negative window
  EXPECT_NO_THROW(paged_append_attention(cpu(), qkv, cfg, host_i32({0, 11}, {2}), ok, k, v, out));
  EXPECT_THROW(paged_append_attention(cpu(), qkv, cfg, host_i32({0}, {1}), ok, k, v, out), Error);  // a slot a row
  EXPECT_THROW(paged_append_attention(cpu(), qkv, cfg, host_i32({0, 11}, {2}), too_long, k, v, out), Error);
}

}  // namespace
}  // namespace troupe::test
