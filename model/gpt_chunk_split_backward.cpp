// Zero-bubble pipelining's split backward (gpt_chunk.hpp: backward_input, backward_weight). B is
// backward_pass with the weight gradients deferred; W runs the deferred GEMMs in backward's order
// (output layer, layers from the last, embedding; FP8 linears with the scales B cast with), so the gradients get
// backward's bits (a tied output layer and embedding share one buffer: their order matters).
#include <utility>

#include "base/check.hpp"
#include "kernels/ops.hpp"
#include "model/gpt_chunk.hpp"

namespace troupe {

void GptChunk::backward_input(ChunkActivations& a, const Tensor& doutput, const Tensor& dinput) {
  TROUPE_CHECK(a.has_grad, "backward_input: these activations come from a forward without training=true");
  // Each of these keeps tensors B would need past the op in a shared workspace, or computes weight
  // gradients B cannot defer yet.
  TROUPE_CHECK(!config().moe.enabled(),
               "--pipeline-schedule zb-h1 or zb-v with --num-experts (MoE layers) is not implemented: use 1f1b");
  TROUPE_CHECK(!recompute_.enabled(),
               "--pipeline-schedule zb-h1 or zb-v with activation recompute (--recompute-activations, "
               "--recompute-granularity) is not implemented: drop the recompute flags or use 1f1b");
  TROUPE_CHECK(!cp_.enabled(),
               "--pipeline-schedule zb-h1 or zb-v with --context-parallel-size > 1 is not implemented: use 1f1b");
  backward_pass(a, doutput, dinput, /*defer_weight_grads=*/true);
}

void GptChunk::backward_weight(ChunkActivations& a) {
  TROUPE_CHECK(a.weight_grads_pending,
               "backward_weight: these activations have had no backward_input since their "
               "forward (or their weight gradients were computed already)");
  const ChunkSpec& spec = layout_.spec();
  const int L = layout_.num_layers();
  if (spec.post_process) {
    auto t = timed("lm_head.wgrad");
    linear_backward(ctx_, a.logits, a.lnf, outer_params_.output, Tensor(), outer_grads_.output, Tensor());
  }
  grads_ready(pending_[size_t(L)]);
  for (int i = L - 1; i >= 0; --i) {
    const StreamSpanScope layer(layer_spans_, ctx_, SpanKind::layer);
    const LayerTensors& w = layer_params_[size_t(i)];
    const LayerTensors& g = layer_grads_[size_t(i)];
    const LayerActivations& s = a.layers[size_t(i)];
    {
      auto t = timed("fc2.wgrad");
      layer_linear_weight_backward(i, LayerLinear::fc2, s.dfc2, s.act, w.fc2_w, g.fc2_w, g.fc2_b, s);
    }
    {
      auto t = timed("fc1.wgrad");
      layer_linear_weight_backward(i, LayerLinear::fc1, s.dfc1, s.ln2, w.fc1_w, g.fc1_w, g.fc1_b, s);
    }
    {
      auto t = timed("proj.wgrad");
      layer_linear_weight_backward(i, LayerLinear::proj, s.dproj, s.attn, w.proj_w, g.proj_w, g.proj_b, s);
    }
    {
      auto t = timed("qkv.wgrad");
      layer_linear_weight_backward(i, LayerLinear::qkv, s.dqkv, s.ln1, w.qkv_w, g.qkv_w, g.qkv_b, s);
    }
    grads_ready(pending_[size_t(i)]);
  }
  if (spec.pre_process) embedding_weight_backward(a, a.dembedding);
  grads_ready(grads_.numel());
  a.weight_grads_pending = false;
}

const Tensor& GptChunk::kept_like(const Tensor& like, Tensor& kept) {
  if (!kept.defined() || kept.shape() != like.shape() || kept.dtype() != like.dtype())
    kept = Tensor::empty(ctx_, like.dtype(), like.shape());
  return kept;
}

void GptChunk::keep_gradient(const Tensor& src, Tensor& kept) { copy(ctx_, src, kept_like(src, kept)); }

Tensor GptChunk::keep_output_gradient(const Tensor& grad, Tensor& dres, Tensor& kept) {
  const bool is_dres = grad.data() == dres.data() && grad.shape() == dres.shape() && grad.dtype() == dres.dtype();
  if (!is_dres) {
    keep_gradient(grad, kept);
    return Tensor();
  }
  kept_like(dres, kept);
  std::swap(dres, kept);
  return kept;
}

}  // namespace troupe
