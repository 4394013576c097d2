// f32 reference of block attention (kernels/attention_block.hpp): the full kernel's row loop
// (kernels/cpu/attention.cpp) over one key block, with the diagonal block's causal cut.
// Merge: with m = max(lse_a, lse_b), lse = m + log(exp(lse_a - m) + exp(lse_b - m)) and
// out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_block.hpp"
#include "kernels/cpu/attention_math.hpp"

namespace troupe::cpu {

namespace {

struct BlockLayout {
  int64_t B, Tq, Tk;
  int H, G, D;
  float scale;
  bool causal;

  int64_t q_at(int64_t b, int64_t t, int h) const { return (b * Tq + t) * H * D + int64_t(h) * D; }
  int64_t key_at(int64_t b, int64_t t, int g) const { return (b * Tk + t) * 2 * G * D + int64_t(g) * D; }
  int64_t value_at(int64_t b, int64_t t, int g) const { return key_at(b, t, G + g); }
  int64_t lse_at(int64_t b, int h, int64_t t) const { return (b * H + h) * Tq + t; }
  // Keys [0, keys(t)) are visible to query t.
  int64_t keys(int64_t t) const { return causal ? t + 1 : Tk; }
  int group_size() const { return H / G; }
};

BlockLayout layout_of(const Tensor& q, const Tensor& kv, const AttentionConfig& cfg, BlockMask mask) {
  const float scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(float(cfg.head_dim));
  return {q.dim(0), q.dim(1), kv.dim(1), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, scale, mask == BlockMask::causal};
}

}  // namespace

void attention_block_forward(const Tensor& q, const Tensor& kv, const AttentionConfig& cfg, BlockMask mask,
                             const Tensor& out, const Tensor& lse) {
  const BlockLayout L = layout_of(q, kv, cfg, mask);
  const float* xq = q.data_as<float>();
  const float* xkv = kv.data_as<float>();
  float* y = out.data_as<float>();
  float* row_lse = lse.data_as<float>();
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < L.B; ++b) {
    for (int64_t hh = 0; hh < L.H; ++hh) {
      const int h = int(hh), g = h / L.group_size();
      std::vector<float> p(size_t(L.Tk));
      for (int64_t t = 0; t < L.Tq; ++t) {
        const float* qt = xq + L.q_at(b, t, h);
        const int64_t n = L.keys(t);
        float m = -INFINITY;
        for (int64_t k = 0; k < n; ++k) {
          p[size_t(k)] = L.scale * dot(qt, xkv + L.key_at(b, k, g), L.D);
          m = std::max(m, p[size_t(k)]);
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < n; ++k) sum += p[size_t(k)] = std::exp(p[size_t(k)] - m);
        float* o = y + L.q_at(b, t, h);
        std::fill(o, o + L.D, 0.0f);
        for (int64_t k = 0; k < n; ++k) axpy(p[size_t(k)] / sum, xkv + L.value_at(b, k, g), o, L.D);
        row_lse[L.lse_at(b, h, t)] = m + std::log(sum);
      }
    }
  }
}

void attention_block_merge(const Tensor& out, const Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  const int64_t B = out.dim(0), T = out.dim(1), H = lse.dim(1), D = out.dim(2) / H;
  float* y = out.data_as<float>();
  float* l = lse.data_as<float>();
  const float* yb = block_out.data_as<float>();
  const float* lb = block_lse.data_as<float>();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t at = (b * H + h) * T + t;
        const float la = l[at], lbt = lb[at];
        if (lbt == -INFINITY) continue;  // the block saw no key: nothing to add
        float* o = y + (b * T + t) * H * D + h * D;
        const float* ob = yb + (b * T + t) * H * D + h * D;
        if (la == -INFINITY) {  // the first block this row sees
          std::copy(ob, ob + D, o);
          l[at] = lbt;
          continue;
        }
        const float m = std::max(la, lbt);
        const float merged = m + std::log(std::exp(la - m) + std::exp(lbt - m));
        const float wa = std::exp(la - merged), wb = std::exp(lbt - merged);
        for (int64_t i = 0; i < D; ++i) o[i] = wa * o[i] + wb * ob[i];
        l[at] = merged;
      }
    }
  }
}

void attention_block_backward(const Tensor& dout, const Tensor& q, const Tensor& kv, const Tensor& out,
                              const Tensor& lse, const AttentionConfig& cfg, BlockMask mask, const Tensor& dq,
                              const Tensor& dkv) {
  const BlockLayout L = layout_of(q, kv, cfg, mask);
  const float* xq = q.data_as<float>();
  const float* xkv = kv.data_as<float>();
  const float* y = out.data_as<float>();
  const float* dy = dout.data_as<float>();
  const float* row_lse = lse.data_as<float>();
  float* dxq = dq.data_as<float>();
  float* dxkv = dkv.data_as<float>();
  // One (batch, kv head) pair per iteration: the query heads of a group add into the same dk/dv.
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < L.B; ++b) {
    for (int64_t gg = 0; gg < L.G; ++gg) {
      const int g = int(gg);
      for (int h = g * L.group_size(); h < (g + 1) * L.group_size(); ++h) {
        for (int64_t t = 0; t < L.Tq; ++t) {
          const float* qt = xq + L.q_at(b, t, h);
          const float* dy_t = dy + L.q_at(b, t, h);
          const float delta = dot(dy_t, y + L.q_at(b, t, h), L.D);
          const float lse_t = row_lse[L.lse_at(b, h, t)];
          float* dqt = dxq + L.q_at(b, t, h);
          for (int64_t k = 0; k < L.keys(t); ++k) {
            const float* key = xkv + L.key_at(b, k, g);
            const float* value = xkv + L.value_at(b, k, g);
            const float p = std::exp(L.scale * dot(qt, key, L.D) - lse_t);
            const float ds = p * (dot(dy_t, value, L.D) - delta);
            axpy(p, dy_t, dxkv + L.value_at(b, k, g), L.D);
            axpy(L.scale * ds, qt, dxkv + L.key_at(b, k, g), L.D);
            axpy(L.scale * ds, key, dqt, L.D);
          }
        }
      }
    }
  }
}

}  // namespace troupe::cpu
