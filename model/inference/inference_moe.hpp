// The inference model's mixture-of-experts MLPs (model/moe/moe_mlp.hpp, training=false): what an
// MoE layer of InferenceModel runs in place of fc1 -> activation -> fc2, and what generating or
// serving an MoE model refuses.
//
// Routing is dropless, so each token's experts depend on that token alone: a sequence gets the
// same logits whatever shares its batch. A capacity (--moe-expert-capacity-factor) would make a
// token's result depend on the other requests of the step, so such models are refused rather
// than served with routing they were not trained with. The router computes in f32 as in
// training: a 16-bit model keeps f32 copies of its router weights, converted once per load.
// With --moe-router-enable-expert-bias the learned bias comes from the checkpoint (Megatron's
// buffer decoder.layers.N.mlp.router.expert_bias): a layer without it loaded refuses to run.
// The forward (model/moe/moe_mlp_inference.hpp) keeps the routing on the device: each expert's
// rows are device offsets the grouped GEMMs read, every buffer is allocated once (for
// min(max_tokens, kInferenceMoeChunkTokens) tokens: longer prefills go through in chunks, which
// routes every token as one forward would), and nothing waits for the host, so MoE decode steps replay from CUDA graphs
// as dense ones do, and a step run op by op runs the same kernels (the same logits).
//
//   check_inference_moe(config, /*tensor_parallel=*/1);   // throws naming the flag
//   InferenceMoe moe(ctx, config, compute, max_tokens);
//   moe.load_routers(layers);                              // after the weights are loaded
//   moe.load_expert_bias(l, bias);                         // expert bias on: host f32 [E] per MoE layer
//   moe.forward(l, layers[l].moe, ln, y);                  // y [n, C] = layer l's MoE MLP of ln
#pragma once

#include <vector>

#include "kernels/tensor.hpp"
#include "model/config.hpp"
#include "model/moe/moe_mlp.hpp"
#include "model/moe/moe_mlp_inference.hpp"
#include "model/param_layout.hpp"

namespace troupe {

// Throws naming the flag when `troupe generate` / `troupe serve` cannot run the MoE model
// exactly: with --tensor-model-parallel-size > 1 or --moe-expert-capacity-factor. Nothing for a
// dense model.
void check_inference_moe(const GptConfig& c, int tensor_parallel);

// Tokens the MoE buffers hold (a forward of more runs in chunks of this many): at Mixtral's
// sizes, top-2, about 450 MB of activations in bf16.
inline constexpr int64_t kInferenceMoeChunkTokens = 2048;

class InferenceMoe {
 public:
  // Nothing to do for a dense model; an MoE one is checked (check_inference_moe) for one rank
  // and gets its buffers for forwards of up to max_tokens rows (at most kInferenceMoeChunkTokens).
  InferenceMoe(const Context& ctx, const GptConfig& c, DType compute, int64_t max_tokens);

  // Refreshes the f32 router copies from the (newly loaded) compute-dtype weights.
  void load_routers(const std::vector<LayerTensors>& layers);
  // MoE layer `layer`'s expert bias (--moe-router-enable-expert-bias): host f32 [E].
  void load_expert_bias(int layer, const Tensor& host_f32);
  // Layer `layer`'s MoE MLP with weights p (its LayerTensors::moe): ln [n, C], the pre-MLP
  // norm's output; y [n, C], overwritten. No host synchronization.
  void forward(int layer, const MoeMlpParams& p, const Tensor& ln, const Tensor& y);

 private:
  const Context& ctx_;
  MoeMlpSpec spec_;
  std::vector<MoeRouterState> state_;  // per layer (empty on dense layers): the expert bias; nothing counted
  std::vector<bool> bias_loaded_;      // per layer: load_expert_bias has given its bias
  std::vector<Tensor> router_f32_;     // per layer: f32 [E, C] copies for 16-bit models, else undefined
  MoeInferenceBuffers buffers_;        // shared by every layer; fixed addresses (CUDA graphs hold them)
};

}  // namespace troupe
