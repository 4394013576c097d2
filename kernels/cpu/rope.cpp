// f32 rotary embedding: the pair (x[i], x[i + D/2]) of every query and key head at position p
// turns by p * base^(-2i/D) (by minus that angle for the inverse). Angles are computed in f32
// exactly as the CUDA kernel does, so both backends agree to rounding.
#include <cmath>

#include "base/check.hpp"
#include "kernels/rope.hpp"
#include "kernels/cpu/parallel.hpp"

namespace troupe::cpu {

void rope_apply(const Tensor& qkv, const Tensor& positions, const RopeConfig& cfg, bool inverse) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1);
  const int D = cfg.head_dim, half = D / 2, rotated_heads = cfg.n_heads + cfg.n_kv_heads;
  const int64_t width = qkv.dim(2);
  const float sign = inverse ? -1.0f : 1.0f;
  float* x = qkv.data_as<float>();
  const int32_t* at = positions.defined() ? positions.data_as<int32_t>() : nullptr;
  if (at)
    for (int64_t i = 0; i < B * T; ++i) TROUPE_CHECK(at[i] >= 0, "rope_apply_at: token ", i, " has position ", at[i]);
#pragma omp parallel for if (worth_parallel(B * T * width)) collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float pos = float(at ? at[b * T + t] : cfg.pos_offset + t);
      for (int i = 0; i < half; ++i) {
        const float inv_freq = rope_inv_freq(i, D, cfg.base, cfg.scaling);
        const float angle = pos * inv_freq;
        const float c = std::cos(angle), s = sign * std::sin(angle);
        // Query heads 0..H-1 and key heads H..H+G-1 are adjacent in the token row.
        for (int head = 0; head < rotated_heads; ++head) {
          float* v = x + (b * T + t) * width + int64_t(head) * D;
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c - x2 * s;
          v[i + half] = x2 * c + x1 * s;
        }
      }
    }
  }
}

}  // namespace troupe::cpu
