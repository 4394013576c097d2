// The MoE MLP for inference (dropless routing, one device): moe_mlp_forward's output with
// training=false, computed without a host synchronization and without allocating, so a decode
// step that runs it can be captured in a CUDA graph and replayed whatever the routing. The
// routing's only data-dependent sizes, each expert's rows, stay on the device as offsets
// (kernels/moe_dispatch.hpp) that the grouped GEMMs read (kernels/grouped_linear.hpp); every
// shape is fixed by the token count, as dropless routing gives R = N * K rows.
//
//   MoeInferenceBuffers b = moe_inference_buffers(ctx, spec, /*max_tokens=*/N, dtype);   // once
//   moe_mlp_inference_forward(ctx, spec, p, state, x, b, y);   // x, y [n, C]: chunks of N tokens
//
// Both backends run it (the CPU's offsets go through the host). Refuses --moe-expert-capacity-factor.
#pragma once

#include <cstdint>

#include "kernels/tensor.hpp"
#include "model/moe/experts.hpp"
#include "model/moe/moe_mlp.hpp"

namespace troupe {

// Every tensor of the forward, sized for max_tokens tokens (N) and fixed for the buffers' life:
// CUDA graphs hold their addresses. A forward of n tokens uses the first n (or n * K) rows.
struct MoeInferenceBuffers {
  int64_t max_tokens = 0;
  Tensor x32;                      // f32 [N, C] the router's input (16-bit models; else undefined)
  Tensor logits;                   // f32 [N, E]
  Tensor probs;                    // f32 [N, K]
  Tensor experts;                  // i32 [N, K]
  Tensor offsets;                  // i32 [E + 1]: expert e's rows are [offsets[e], offsets[e + 1])
  Tensor row_choice;               // i32 [N * K]  the row map (kernels/moe_permute.hpp)
  Tensor choice_row;               // i32 [N, K]
  Tensor xp, expert_out;           // [N * K, C]
  MoeExpertActivations routed;     // fc1 [N * K, F1], act [N * K, F]
  SharedExpertActivations shared;  // [N, ...] with a shared expert, else undefined
};
MoeInferenceBuffers moe_inference_buffers(const Context& ctx, const MoeMlpSpec& spec, int64_t max_tokens, DType dtype);

// x: [n, C]; y: [n, C] (overwritten). p and state as moe_mlp_forward's. More than b.max_tokens
// tokens (a long prefill) go through in chunks of b.max_tokens: each token's output is its own
// (dropless routing), so chunking changes at most the GEMMs' summation order, and the buffers,
// not the prompt, bound the memory.
void moe_mlp_inference_forward(const Context& ctx, const MoeMlpSpec& spec, const MoeMlpParams& p,
                               const MoeRouterState& state, const Tensor& x, const MoeInferenceBuffers& b,
                               const Tensor& y);

}  // namespace troupe
