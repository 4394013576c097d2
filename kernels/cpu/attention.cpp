// f32 reference for causal grouped-query attention. One query row at a time with O(T)
// scratch; backward rebuilds the probabilities from the saved lse and uses
// delta_t = rowsum(dout_t * out_t) = sum_k p_tk dp_tk for the softmax gradient. A sliding
// window only narrows each row's key range to [first_key(t), t].
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/cpu/attention_math.hpp"

namespace troupe::cpu {

namespace {

// Where things live in qkv [B, T, (H + 2G) * D] and out [B, T, H * D].
struct AttentionLayout {
  int64_t B, T;
  int H, G, D;
  float scale;
  int window;  // 0: unbounded

  // The first key query t sees: t - W + 1 under a window of W, else 0.
  int64_t first_key(int64_t t) const { return window > 0 ? std::max<int64_t>(0, t - window + 1) : 0; }

  int64_t qkv_width() const { return int64_t(H + 2 * G) * D; }
  // Offset of head slot `slot` (queries 0..H-1, keys H..H+G-1, values H+G..H+2G-1) of token (b, t).
  int64_t qkv_at(int64_t b, int64_t t, int slot) const { return (b * T + t) * qkv_width() + int64_t(slot) * D; }
  int64_t out_at(int64_t b, int64_t t, int h) const { return (b * T + t) * H * D + int64_t(h) * D; }
  int64_t lse_at(int64_t b, int h, int64_t t) const { return (b * H + h) * T + t; }
  int key_slot(int g) const { return H + g; }
  int value_slot(int g) const { return H + G + g; }
  int group_size() const { return H / G; }
};

AttentionLayout layout_of(const Tensor& qkv, const AttentionConfig& cfg) {
  const float scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(float(cfg.head_dim));
  return {qkv.dim(0), qkv.dim(1), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, scale, cfg.window};
}

}  // namespace

void attention_forward(const Tensor& qkv, const AttentionConfig& cfg, const Tensor& out, const Tensor& lse) {
  const AttentionLayout L = layout_of(qkv, cfg);
  const float* x = qkv.data_as<float>();
  float* y = out.data_as<float>();
  float* row_lse = lse.data_as<float>();
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < L.B; ++b) {
    for (int64_t hh = 0; hh < L.H; ++hh) {
      const int h = int(hh), g = h / L.group_size();
      std::vector<float> p(size_t(L.T));
      for (int64_t t = 0; t < L.T; ++t) {
        const float* q = x + L.qkv_at(b, t, h);
        const int64_t k0 = L.first_key(t);
        float m = -INFINITY;
        for (int64_t k = k0; k <= t; ++k) {
          p[k] = L.scale * dot(q, x + L.qkv_at(b, k, L.key_slot(g)), L.D);
          m = std::max(m, p[k]);
        }
        float sum = 0.0f;
        for (int64_t k = k0; k <= t; ++k) sum += p[k] = std::exp(p[k] - m);
        float* o = y + L.out_at(b, t, h);
        std::fill(o, o + L.D, 0.0f);
        for (int64_t k = k0; k <= t; ++k) axpy(p[k] / sum, x + L.qkv_at(b, k, L.value_slot(g)), o, L.D);
        row_lse[L.lse_at(b, h, t)] = m + std::log(sum);
      }
    }
  }
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionConfig& cfg, const Tensor& dqkv) {
  const AttentionLayout L = layout_of(qkv, cfg);
  const float* x = qkv.data_as<float>();
  const float* y = out.data_as<float>();
  const float* dy = dout.data_as<float>();
  const float* row_lse = lse.data_as<float>();
  float* dx = dqkv.data_as<float>();
  std::fill(dx, dx + dqkv.numel(), 0.0f);
  // One (batch, kv head) pair per iteration: the query heads of a group all add into the
  // same dk/dv, so they stay in one thread.
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < L.B; ++b) {
    for (int64_t gg = 0; gg < L.G; ++gg) {
      const int g = int(gg);
      for (int h = g * L.group_size(); h < (g + 1) * L.group_size(); ++h) {
        for (int64_t t = 0; t < L.T; ++t) {
          const float* q = x + L.qkv_at(b, t, h);
          const float* dy_t = dy + L.out_at(b, t, h);
          const float delta = dot(dy_t, y + L.out_at(b, t, h), L.D);
          const float lse_t = row_lse[L.lse_at(b, h, t)];
          float* dq = dx + L.qkv_at(b, t, h);
          for (int64_t k = L.first_key(t); k <= t; ++k) {
            const float* key = x + L.qkv_at(b, k, L.key_slot(g));
            const float* value = x + L.qkv_at(b, k, L.value_slot(g));
            const float p = std::exp(L.scale * dot(q, key, L.D) - lse_t);
            const float ds = p * (dot(dy_t, value, L.D) - delta);
            axpy(p, dy_t, dx + L.qkv_at(b, k, L.value_slot(g)), L.D);
            axpy(L.scale * ds, q, dx + L.qkv_at(b, k, L.key_slot(g)), L.D);
            axpy(L.scale * ds, key, dq, L.D);
          }
        }
      }
    }
  }
}

}  // namespace troupe::cpu
