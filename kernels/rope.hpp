// Rotary position embedding, applied in place to the query and key heads of a fused
// QKV activation (see attention.hpp for the layout). Non-interleaved ("rotate half",
// as HF Llama and Megatron's default): for i < D/2 the pair (x[i], x[i + D/2]) at position
// p is rotated by the angle p * base^(-2i/D), computed in f32.
// Llama 3.1's frequency scaling (HF rope_type "llama3", Megatron --use-rope-scaling) changes
// base^(-2i/D) per i (rope_inv_freq); nothing else.
// RoPE is linear and orthogonal, so backward is the same rotation with the angle negated:
//   forward:  rope_apply(ctx, qkv,  ..., /*inverse=*/false)
//   backward: rope_apply(ctx, dqkv, ..., /*inverse=*/true)
#pragma once

#include <cmath>

#include "kernels/host_device.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// Llama 3.1's RoPE frequency scaling (transformers' _compute_llama3_parameters): wavelengths
// 2 pi / f shorter than original_max_positions / high_freq_factor keep their frequency, those
// longer than original_max_positions / low_freq_factor are divided by `factor`, and the band
// between is interpolated smoothly. Off: every frequency as it is.
struct RopeScaling {
  bool llama3 = false;
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_positions = 8192.0f;
};

// The rotation frequency of pair i of a head of dimension D, in f32 as transformers computes it.
TROUPE_HOST_DEVICE float rope_inv_freq(int i, int D, float base, const RopeScaling& s) {
  const float inv_freq = 1.0f / powf(base, float(2 * i) / float(D));
  if (!s.llama3) return inv_freq;
  const float wavelen = 2.0f * 3.14159265358979323846f / inv_freq;
  const float low_freq_wavelen = s.original_max_positions / s.low_freq_factor;
  const float high_freq_wavelen = s.original_max_positions / s.high_freq_factor;
  if (wavelen < high_freq_wavelen) return inv_freq;  // high frequencies: as they are
  if (wavelen > low_freq_wavelen) return inv_freq / s.factor;
  const float smooth =
      (s.original_max_positions / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0f - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

struct RopeConfig {
  int n_heads = 0;     // H query heads
  int n_kv_heads = 0;  // G key/value heads
  int head_dim = 0;    // D, even
  float base = 10000.0f;
  int64_t pos_offset = 0;  // position of t = 0 (for decoding with a KV cache)
  RopeScaling scaling{};
};

// qkv: [B, T, (H + 2G) * D]; only the H query and G key heads are rotated; v is untouched.
void rope_apply(const Context& ctx, const Tensor& qkv, const RopeConfig& cfg, bool inverse);
// The same with a position per token instead of pos_offset + t (inference: a flattened batch
// of sequences at different positions). positions: i32 [B * T] on ctx's device, >= 0.
void rope_apply_at(const Context& ctx, const Tensor& qkv, const Tensor& positions, const RopeConfig& cfg, bool inverse);

// positions: undefined (pos_offset + t) or i32 [B * T].
namespace cpu {
void rope_apply(const Tensor& qkv, const Tensor& positions, const RopeConfig& cfg, bool inverse);
}
namespace cuda {
void rope_apply(const Context& ctx, const Tensor& qkv, const Tensor& positions, const RopeConfig& cfg, bool inverse);
}

}  // namespace troupe
