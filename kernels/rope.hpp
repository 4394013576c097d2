// Rotary position embedding, applied in place to the query and key heads of a fused
// QKV activation (see attention.hpp for the layout). Non-interleaved ("rotate half",
// as HF Llama and Megatron's default): for i < D/2 the pair (x[i], x[i + D/2]) at position
// p is rotated by the angle p * base^(-2i/D), computed in f32.
// RoPE is linear and orthogonal, so backward is the same rotation with the angle negated:
//   forward:  rope_apply(ctx, qkv,  ..., /*inverse=*/false)
//   backward: rope_apply(ctx, dqkv, ..., /*inverse=*/true)
#pragma once

#include "kernels/tensor.hpp"

namespace troupe {

struct RopeConfig {
  int n_heads = 0;     // H query heads
  int n_kv_heads = 0;  // G key/value heads
  int head_dim = 0;    // D, even
  float base = 10000.0f;
  int64_t pos_offset = 0;  // position of t = 0 (for decoding with a KV cache)
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
