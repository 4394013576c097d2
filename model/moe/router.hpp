// The MoE router (Megatron-Core's TopKRouter): logits = x · Wr^T in f32, top-k experts per
// token with their weights (kernels/moe_routing.hpp), token dropping at the expert capacity,
// the load-balancing losses (aux_loss, seq_aux_loss), the z-loss, and the counts the
// aux-loss-free expert bias is updated from. Backward turns d(weights) plus the gradients of
// those losses into d(x) and d(Wr).
//
//   MoeRouting r;
//   moe_router_forward(ctx, cfg, w, state, x, seq_length, /*training=*/true, r);
//   ... r.probs weight the experts' outputs; loss += r.losses.total() ...
//   moe_router_backward(ctx, cfg, w, x, r, dprobs, /*loss_grad_scale=*/1, dx, dw);
//   moe_update_expert_bias(ctx, state, cfg.moe_router_bias_update_rate);   // once per optimizer step
//
// Both backends run the same steps (kernels/moe_routing.hpp, moe_dispatch.hpp,
// moe_router_losses.hpp). On CUDA everything stays on the device except one small
// device->host copy at the end of forward: the kept tokens per expert and the loss values. The
// dropless (and dropping, unpadded) layout needs the counts on the host to size the permuted
// buffer and the grouped GEMM's problems, as Megatron's dropless dispatchers sync there too;
// with padding to capacity the sizes are known, and the copy then only serves the statistics.
//
// Router precision: logits = x · Wr^T with Wr f32 and f32 output. cuBLAS(Lt) multiplies two
// matrices of one type only, so a bf16/f16 x is first converted to f32 (exact) and the GEMM
// runs in full FP32 (no TF32): the logits are the CPU reference's up to summation order, as
// Megatron's --moe-router-dtype fp32 (which casts input and weight to fp32). Casting Wr to
// bf16 instead would round the router weights and move the routing. The cost, a [N, C] f32
// copy and a 2NCE-flop FP32 GEMM, is E / (3 K F) of the experts' flops.
//
// Token order: rows are Troupe's [B, T] (row n = b * T + t). Megatron's router sees [T, B]
// (s-major), and two rules depend on the order: the "position" drop policy keeps the tokens
// that come first in Megatron's order (earliest positions of every sequence first), and ties of
// equal probs are broken the same way. seq_aux_loss averages over the B sequences.
//
// Context parallelism (a context group: each rank holds a part of every sequence): the
// load-balancing loss's counts are summed over the group before its loss, each rank computes
// its rows' part of the losses with the whole microbatch's sizes (kernels/moe_router_losses.hpp),
// and the parts and the kept counts are summed over the group for the statistics, as Megatron
// reduces tokens_per_expert over the tensor x context group. Backward needs no communication:
// each rank differentiates the whole loss on its rows, and the gradients' sum over the data x
// context group adds the parts. Capacity dropping ranks a microbatch's tokens across the
// context ranks and is refused there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/collectives.hpp"
#include "kernels/tensor.hpp"
#include "model/moe/moe_config.hpp"

namespace troupe {

// The router's non-parameter state (Megatron's expert_bias and local_tokens_per_expert
// buffers). f32, on the router's device.
struct MoeRouterState {
  Tensor expert_bias;        // [E]; undefined without --moe-router-enable-expert-bias
  Tensor tokens_per_expert;  // [E]; tokens routed to each expert over the training forwards since the last update
};
MoeRouterState moe_router_state(const MoeConfig& cfg);  // host (the CPU backend)
MoeRouterState moe_router_state(const Context& ctx, const MoeConfig& cfg);
// The expert bias's name in checkpoints, Megatron's buffer "decoder.layers.N.mlp.router.expert_bias".
std::string moe_expert_bias_name(int global_layer);

// The router's contribution to the training objective, each term with its coefficient (what
// backward differentiates). Megatron logs load_balancing_loss = aux_loss / coeff, z_loss =
// z_loss / coeff.
struct MoeRouterLosses {
  double aux_loss = 0;      // --moe-router-load-balancing-type aux_loss
  double seq_aux_loss = 0;  // seq_aux_loss
  double z_loss = 0;        // --moe-z-loss-coeff
  double total() const { return aux_loss + seq_aux_loss + z_loss; }
};

struct MoeRouting {
  int64_t tokens = 0, seq_length = 0;
  Tensor logits;                           // f32 [N, E]
  Tensor probs;                            // f32 [N, K]: each choice's weight, 0 where the choice was dropped
  Tensor experts;                          // i32 [N, K]
  Tensor kept;                             // u8 [N, K]: 1 where the choice survived the capacity
  std::vector<int64_t> tokens_per_expert;  // [E] kept (token, choice) pairs per expert (what this rank dispatches)
  // [E] the same over the context group (the microbatch's every token): what the statistics report.
  std::vector<int64_t> context_tokens_per_expert;
  int context_size = 1;  // the context ranks whose rows make up the microbatch (the losses' sizes)
  // Rows each expert gets: its kept tokens, or its capacity when padding to capacity.
  std::vector<int64_t> expert_rows;
  int64_t capacity = 0;  // 0: dropless
  int64_t dropped = 0;   // choices dropped by the capacity
  bool training = false;
  MoeRouterLosses losses;  // summed over the context group: the microbatch's

  // What the losses' backward needs: the load-balancing loss's per-expert token counts (of
  // its own top-k on the unbiased scores, summed over the context group), f32 [1, E], or [B, E]
  // for seq_aux_loss.
  Tensor balance_tokens_per_expert;
};

// w: f32 [E, C]; x: [N, C] (N a multiple of seq_length), f32 or (CUDA) bf16/f16. Training adds the losses and counts
// this forward's tokens per expert into state.tokens_per_expert (expert bias on; this rank's:
// the optimizer step sums them over the data x context group). context_group: under context
// parallelism the group holding the other parts of x's sequences (every member calls it;
// seq_length is then the local part's); null: none.
void moe_router_forward(const Context& ctx, const MoeConfig& cfg, const Tensor& w, MoeRouterState& state,
                        const Tensor& x, int64_t seq_length, bool training, MoeRouting& r,
                        Collectives* context_group = nullptr);
// Inference routing, dropless: what moe_router_forward(training=false) computes without a
// capacity, written into the caller's buffers, with no statistics and nothing copied to the
// host, so it can run inside a CUDA graph. logits f32 [N, E], probs f32 [N, K], experts i32
// [N, K] (overwritten); x32: f32 [N, C] scratch for a 16-bit x (undefined for an f32 x).
// Refuses a config with --moe-expert-capacity-factor.
void moe_router_route(const Context& ctx, const MoeConfig& cfg, const Tensor& w, const MoeRouterState& state,
                      const Tensor& x, const Tensor& x32, const Tensor& logits, const Tensor& probs,
                      const Tensor& experts);
// dprobs: f32 [N, K], the gradient of r.probs (zero where dropped). loss_grad_scale: what
// scales the gradient of the main loss (loss scale / microbatches; Megatron's
// MoEAuxLossAutoScaler), applied to the router's own losses. dx [N, C] ACCUMULATES; dw f32
// [E, C] accumulates.
void moe_router_backward(const Context& ctx, const MoeConfig& cfg, const Tensor& w, const Tensor& x,
                         const MoeRouting& r, const Tensor& dprobs, float loss_grad_scale, const Tensor& dx,
                         const Tensor& dw);

// Megatron's get_updated_expert_bias: b_e += rate * sign(mean(tokens) - tokens_e). tokens: the
// counts of one optimizer step, summed over the data-parallel (and TP, CP) ranks first.
std::vector<float> moe_updated_expert_bias(const std::vector<float>& tokens_per_expert,
                                           const std::vector<float>& expert_bias, float rate);
// Applies it to state and zeroes the counts (Megatron's finalize_model_grads step). Once per
// optimizer step: a device state goes through the host (a synchronizing copy, off the
// forward/backward path).
void moe_update_expert_bias(const Context& ctx, MoeRouterState& state, float rate);
void moe_update_expert_bias(MoeRouterState& state, float rate);  // a host state

}  // namespace troupe
