#include "model/inference/inference_moe.hpp"

#include <algorithm>

#include "base/check.hpp"
#include "kernels/elementwise.hpp"
#include "model/config_moe.hpp"

namespace troupe {

void check_inference_moe(const GptConfig& c, int tensor_parallel) {
  if (!c.moe.enabled()) return;
  const MoeConfig& m = c.moe;
  // The experts are whole on every rank (no expert-tensor-parallel layout yet).
  TROUPE_CHECK(tensor_parallel == 1, "--tensor-model-parallel-size ", tensor_parallel,
               " with a mixture-of-experts model (--num-experts ", m.num_experts,
               ") is not implemented for generating or serving: use --tensor-model-parallel-size 1");
  // Megatron drops tokens at the capacity in inference too: the capacity counts the tokens of
  // the whole forward, so a request's output would depend on the requests batched with it.
  TROUPE_CHECK(!m.drops_tokens(), "the model was trained with --moe-expert-capacity-factor ",
               m.moe_expert_capacity_factor,
               ": generating or serving it is refused, as its token dropping would make each request's output depend "
               "on the requests batched with it; train the model dropless (without --moe-expert-capacity-factor)");
}

InferenceMoe::InferenceMoe(const Context& ctx, const GptConfig& c, DType compute, int64_t max_tokens) : ctx_(ctx) {
  if (!c.moe.enabled()) return;
  check_inference_moe(c, 1);
  spec_ = moe_mlp_spec(c);
  buffers_ = moe_inference_buffers(ctx, spec_, std::min(max_tokens, kInferenceMoeChunkTokens), compute);
  state_.resize(size_t(c.num_layers));
  router_f32_.resize(size_t(c.num_layers));
  bias_loaded_.assign(size_t(c.num_layers), false);
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    state_[size_t(l)] = moe_router_state(ctx, c.moe);
    if (compute != DType::f32)
      router_f32_[size_t(l)] = Tensor::empty(ctx, DType::f32, {c.moe.num_experts, c.hidden_size});
  }
}

void InferenceMoe::load_routers(const std::vector<LayerTensors>& layers) {
  for (size_t l = 0; l < router_f32_.size(); ++l)
    if (router_f32_[l].defined()) convert(ctx_, layers[l].moe.router, router_f32_[l]);
}

void InferenceMoe::load_expert_bias(int layer, const Tensor& host_f32) {
  TROUPE_CHECK(layer >= 0 && layer < int(state_.size()) && state_[size_t(layer)].expert_bias.defined(),
               "InferenceMoe: layer ", layer,
               " has no expert bias (not an MoE layer, or no --moe-router-enable-expert-bias)");
  const Tensor& bias = state_[size_t(layer)].expert_bias;
  TROUPE_CHECK(host_f32.dtype() == DType::f32 && !host_f32.is_cuda() && host_f32.shape() == bias.shape(),
               "InferenceMoe: layer ", layer, "'s expert bias must be host f32 ", shape_str(bias.shape()), ", got ",
               host_f32.str());
  copy(ctx_, host_f32, bias);
  ctx_.synchronize();  // the host source may go away
  bias_loaded_[size_t(layer)] = true;
}

void InferenceMoe::forward(int layer, const MoeMlpParams& p, const Tensor& ln, const Tensor& y) {
  TROUPE_CHECK(!spec_.moe.moe_router_enable_expert_bias || bias_loaded_[size_t(layer)], "layer ", layer,
               "'s router has --moe-router-enable-expert-bias but no expert bias was loaded (a checkpoint's ",
               "decoder.layers.", layer, ".mlp.router.expert_bias)");
  MoeMlpParams w = p;
  if (router_f32_[size_t(layer)].defined()) w.router = router_f32_[size_t(layer)];
  moe_mlp_inference_forward(ctx_, spec_, w, state_[size_t(layer)], ln, buffers_, y);
}

}  // namespace troupe
