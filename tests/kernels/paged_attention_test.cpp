// CPU paged attention against the dense causal attention kernel on the same data: sequences
// of different lengths in shuffled cache blocks, a whole-prompt prefill, then the rest in
// mixed steps (some sequences a few tokens, others one), GQA and MHA.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/paged_attention.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

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
      ref.push_back(Tensor::host(DType::f32, {1, L, int64_t(cfg.n_heads) * cfg.head_dim}));
      Tensor lse = Tensor::host(DType::f32, {1, cfg.n_heads, L});
      attention_forward(cpu(), qkv.back(), {cfg.n_heads, cfg.n_kv_heads, cfg.head_dim}, ref.back(), lse);
      blocks.emplace_back();
      for (int64_t b = 0; b < (L + cfg.block_size - 1) / cfg.block_size; ++b) blocks.back().push_back(ids[next++]);
    }
    const Shape cache{int64_t(ids.size()), cfg.block_size, cfg.n_kv_heads, cfg.head_dim};
    k_cache = random_normal(cache, 1);  // garbage where nothing was appended
    v_cache = random_normal(cache, 2);
  }

  // Runs one step: sequence s gets its tokens [done[s], done[s] + take[s]) as new rows.
  // Returns the max relative error of the rows against the dense reference.
  double step(std::vector<int64_t>& done, const std::vector<int64_t>& take) {
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
      tables.insert(tables.end(), row.begin(), row.end());
    }
    const int64_t N = start.back(), S = int64_t(lengths.size());
    const Tensor x = Tensor::host_f32({N, W}, rows);
    paged_kv_append(cpu(), x, cfg, host_i32(slots, {N}), k_cache, v_cache);
    Tensor out = Tensor::host(DType::f32, {N, HD});
    const PagedBatch batch{host_i32(start, {S + 1}), host_i32(lens, {S}), host_i32(tables, {S, max_blocks})};
    paged_attention(cpu(), x, cfg, batch, k_cache, v_cache, out);
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

TEST_P(PagedAttention, PrefillThenMixedStepsMatchDense) {
  PagedFixture f(GetParam().cfg, GetParam().lengths);
  const size_t S = f.lengths.size();
  std::vector<int64_t> done(S, 0), take(S);
  for (size_t s = 0; s < S; ++s) take[s] = f.lengths[s] / 2;
  double worst = f.step(done, take);
  auto unfinished = [&] {
    for (size_t s = 0; s < S; ++s)
      if (done[s] < f.lengths[s]) return true;
    return false;
  };
  for (int step = 0; unfinished(); ++step) {
    // Sequence s takes 1 token (decode) or, every third step for odd s, up to 3 (a prefill chunk).
    for (size_t s = 0; s < S; ++s)
      take[s] = std::min<int64_t>(f.lengths[s] - done[s], (s % 2 == 1 && step % 3 == 0) ? 3 : 1);
    worst = std::max(worst, f.step(done, take));
  }
  std::printf("mixed steps: max rel err %.2e\n", worst);
  EXPECT_LT(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttention,
                         ::testing::Values(PagedCase{{4, 2, 16, 4}, {5, 17, 1, 33}},  // GQA, block 4
                                           PagedCase{{3, 3, 8, 16}, {40, 2, 16}},     // MHA, block 16
                                           PagedCase{{8, 1, 32, 8}, {9, 24}}));       // MQA

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
}

}  // namespace
}  // namespace troupe::test
