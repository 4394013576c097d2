// What one microbatch's forward keeps for its backward, per layer and for the chunk.
// A chunk hands these out from a pool: with 1F1B several microbatches are in flight, and
// a finished backward returns its set to the pool, so activation memory is reused at once.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/config.hpp"
#include "model/moe/moe_mlp.hpp"

namespace troupe {

struct LayerActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // [N, C], f32 [N], f32 [N] (mean unused by RMSNorm)
  Tensor qkv;                      // [N, (H+2G)*D], after the q/k norms and RoPE
  Tensor qk, q_rstd, k_rstd;       // qk_layernorm: [N, (H+G)*D] q and k before their norms, f32 [N, H], f32 [N, G]
  Tensor attn, lse;                // [N, H*D], f32 [B, H, T]
  Tensor x_mid;                    // [N, C] residual stream after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // [N, C], f32 [N], f32 [N]
  Tensor fc1;                      // [N, F or 2F] before the activation
  Tensor act;                      // [N, F] after the activation
  // An MoE layer's MLP instead of fc1/act (undefined there): routing, permuted tokens, the
  // experts' activations; made by each forward (their sizes follow the routing).
  MoeMlpActivations moe;
  // Zero-bubble split backward (GptChunk::backward_input): the GEMMs' output gradients, kept from
  // B to W for the weight gradients; allocated by the first split backward of this set.
  Tensor dqkv;   // [N, (H+2G)*D / TP]
  Tensor dproj;  // [N, C] (all rows under sequence parallelism)
  Tensor dfc1;   // [N, (F or 2F) / TP]
  Tensor dfc2;   // [N, C] (all rows)
  // FP8: the scales B cast x and dy with, for W (Fp8Linears::backward_input), f32 per linear
  // [Fp8Linears::kWgradScales, kFp8ScaleRow].
  Tensor fp8_wgrad_scales;

  // Bytes of the tensors held (a recomputed tensor is not held: model/recompute.hpp).
  size_t bytes() const {
    size_t n = moe_mlp_activation_bytes(moe);
    for (const Tensor* t : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &qk,  &q_rstd, &k_rstd, &attn, &lse,  &x_mid,
                            &ln2, &ln2_mean, &ln2_rstd, &fc1, &act, &dqkv,   &dproj,  &dfc1, &dfc2, &fp8_wgrad_scales})
      if (t->defined()) n += t->nbytes();
    return n;
  }
};

struct ChunkActivations {
  int64_t batch = 0, seq = 0;  // B, T; N = B * T rows
  Tensor tokens, targets;      // i32 [B, T] on the device (pre/post-process chunks)
  // num_layers + 1 tensors [N, C]: input of each layer, then the output (undefined where full
  // recompute does not keep it: model/recompute.hpp)
  std::vector<Tensor> residual;
  std::vector<LayerActivations> layers;
  Tensor lnf, lnf_mean, lnf_rstd;  // final norm (post-process chunk)
  Tensor logits;                   // [N, Vp]; holds dlogits after a training forward
  Tensor losses;                   // f32 [N] per-token loss (0 for ignored targets)
  uint64_t dropout_seed = 0;
  // ForwardOptions::moe_loss_grad_scale of the forward (the weight of the router losses)
  float moe_loss_grad_scale = 1.0f;
  bool has_grad = false;  // a training forward ran; backward may follow
  // Zero-bubble split backward: the embedding output's gradient [N, C] (pre-process chunk), kept
  // from B to W; set by backward_input, cleared by backward_weight.
  Tensor dembedding;
  bool weight_grads_pending = false;
  // Two lanes (GptChunk::set_lane): where the backward that released this set ended; its next
  // forward waits for it.
  std::shared_ptr<void> released;

  int64_t rows() const { return batch * seq; }
  // Activation bytes this microbatch holds until its backward (the tokens and targets, the
  // caller's inputs, not counted).
  size_t bytes() const {
    size_t n = 0;
    for (const Tensor& t : residual)
      if (t.defined()) n += t.nbytes();
    for (const LayerActivations& l : layers) n += l.bytes();
    for (const Tensor* t : {&lnf, &lnf_mean, &lnf_rstd, &logits, &losses, &dembedding})
      if (t->defined()) n += t->nbytes();
    return n;
  }
};

}  // namespace troupe
