// f32 reference for paged attention: one query row at a time with O(context) scratch, keys
// and values looked up slot by slot through the block table. Block ids and slots are checked
// (the CUDA kernels trust them): every block a row reads, so under a sliding window not the
// blocks wholly before the window of a sequence's first new row.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/cpu/attention_math.hpp"

namespace troupe::cpu {

namespace {

// The first position a row at position `pos` sees.
int64_t first_key(int64_t pos, int window) { return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; }

}  // namespace

void paged_kv_append(const Tensor& qkv, const PagedAttentionConfig& cfg, const Tensor& slots, const Tensor& k_cache,
                     const Tensor& v_cache) {
  const int64_t n = qkv.dim(0), width = qkv.dim(1);
  const int64_t num_slots = k_cache.dim(0) * cfg.block_size;
  const int64_t kv_width = int64_t(cfg.n_kv_heads) * cfg.head_dim;
  const int64_t k_col = int64_t(cfg.n_heads) * cfg.head_dim, v_col = k_col + kv_width;
  const float* x = qkv.data_as<float>();
  const int32_t* slot = slots.data_as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    TROUPE_CHECK(slot[i] >= 0 && slot[i] < num_slots, "paged_kv_append: row ", i, " has slot ", slot[i],
                 ", outside the cache's ", num_slots, " slots");
    std::copy_n(x + i * width + k_col, kv_width, k_cache.data_as<float>() + int64_t(slot[i]) * kv_width);
    std::copy_n(x + i * width + v_col, kv_width, v_cache.data_as<float>() + int64_t(slot[i]) * kv_width);
  }
}

void paged_attention(const Tensor& qkv, const PagedAttentionConfig& cfg, const PagedBatch& batch, const Tensor& k_cache,
                     const Tensor& v_cache, const Tensor& out) {
  const int H = cfg.n_heads, G = cfg.n_kv_heads, D = cfg.head_dim, bs = cfg.block_size;
  const float scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(float(D));
  const int64_t S = batch.seq_lens.dim(0), max_blocks = batch.block_tables.dim(1), width = qkv.dim(1);
  const int64_t kv_width = int64_t(G) * D, num_blocks = k_cache.dim(0);
  const int32_t* start = batch.query_start.data_as<int32_t>();
  const int32_t* lens = batch.seq_lens.data_as<int32_t>();
  const int32_t* tables = batch.block_tables.data_as<int32_t>();
  const float* x = qkv.data_as<float>();
  const float* kc = k_cache.data_as<float>();
  const float* vc = v_cache.data_as<float>();
  float* y = out.data_as<float>();
  TROUPE_CHECK(start[0] == 0 && start[S] == qkv.dim(0),
               "paged_attention: query_start must run from 0 to N = ", qkv.dim(0), ", got ", start[0], " .. ",
               start[S]);
  int64_t longest = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n_new = start[s + 1] - start[s];
    longest = std::max<int64_t>(longest, lens[s]);
    TROUPE_CHECK(n_new >= 0 && n_new <= lens[s] && lens[s] <= max_blocks * bs, "paged_attention: sequence ", s, " has ",
                 n_new, " new tokens and length ", lens[s], " (a block table holds ", max_blocks * bs, ")");
    for (int64_t b = first_key(lens[s] - n_new, cfg.window) / bs; b < (lens[s] + bs - 1) / bs; ++b) {
      const int32_t id = tables[s * max_blocks + b];
      TROUPE_CHECK(id >= 0 && id < num_blocks, "paged_attention: sequence ", s, " block ", b, " is ", id,
                   ", outside the cache's ", num_blocks, " blocks");
    }
  }
  // Offset of the key/value head g of position p of sequence s.
  auto kv_at = [&](int64_t s, int64_t p, int g) {
    const int64_t slot = int64_t(tables[s * max_blocks + p / bs]) * bs + p % bs;
    return slot * kv_width + int64_t(g) * D;
  };
#pragma omp parallel for if (worth_parallel(qkv.numel() * longest)) collapse(2) schedule(dynamic)
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t hh = 0; hh < H; ++hh) {
      const int h = int(hh), g = h / (H / G);
      std::vector<float> p(size_t(std::max(lens[s], 1)));
      for (int64_t row = start[s]; row < start[s + 1]; ++row) {
        const int64_t pos = lens[s] - (start[s + 1] - row);  // this token's position
        const float* q = x + row * width + int64_t(h) * D;
        const int64_t k0 = first_key(pos, cfg.window);
        float m = -INFINITY;
        for (int64_t k = k0; k <= pos; ++k) {
          p[size_t(k)] = scale * dot(q, kc + kv_at(s, k, g), D);
          m = std::max(m, p[size_t(k)]);
        }
        float sum = 0.0f;
        for (int64_t k = k0; k <= pos; ++k) sum += p[size_t(k)] = std::exp(p[size_t(k)] - m);
        float* o = y + row * int64_t(H) * D + int64_t(h) * D;
        std::fill(o, o + D, 0.0f);
        for (int64_t k = k0; k <= pos; ++k) {
          const float w = p[size_t(k)] / sum;
          const float* v = vc + kv_at(s, k, g);
          for (int i = 0; i < D; ++i) o[i] += w * v[i];
        }
      }
    }
  }
}

}  // namespace troupe::cpu
