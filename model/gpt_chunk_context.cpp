// GptChunk under context parallelism (model/context_parallel.hpp): the local tokens' global
// positions for RoPE and the learned position embedding. Core attention's ring is called from
// core_attention_forward and layer_backward; dropout follows global rows in site_dropout; MoE
// routers reduce their statistics over the context group in moe_forward.
#include "base/check.hpp"
#include "kernels/ops.hpp"
#include "model/gpt_chunk.hpp"

namespace troupe {

void GptChunk::set_context_parallel(const ContextParallel& cp) {
  TROUPE_CHECK(cp.size >= 1 && cp.rank >= 0 && cp.rank < cp.size, "GptChunk: context rank ", cp.rank, " of ", cp.size);
  TROUPE_CHECK(!fp8_, "GptChunk: set_context_parallel before enable_fp8 (FP8 scales reduce over the context group)");
  if (cp.size > 1) {
    TROUPE_CHECK(cp.comm != nullptr && cp.comm->size() == cp.size && cp.comm->rank() == cp.rank,
                 "GptChunk: context rank ", cp.rank, " of ", cp.size, " needs the context group's collectives");
    TROUPE_CHECK(config().sliding_window == 0,
                 "--context-parallel-size with a sliding window (--window-size) is not implemented; use one or the "
                 "other");
    // MoE layers take their routers' statistics over the context group (model/moe/router.hpp).
    config().moe.validate_context_parallel(cp.size);
  }
  cp_ = cp;
  cp_positions_ = Tensor();
}

const Tensor& GptChunk::context_positions_of(int64_t batch, int64_t seq) {
  if (!cp_positions_.defined() || cp_positions_.numel() != batch * seq)
    cp_positions_ = context_positions(ctx_, cp_, batch, seq);
  return cp_positions_;
}

void GptChunk::add_context_position_embedding(const Tensor& out) {
  const Tensor& wpe = outer_params_.wpe;
  if (!wpe.defined()) return;
  const int64_t B = out.dim(0), T = out.dim(1);
  // The position rows looked up like tokens, then added: wte[token] + wpe[position] as one
  // embedding_forward computes it.
  const Tensor positions = Tensor::stream_ordered(ctx_, compute_, out.shape());  // freed without a device sync
  embedding_forward(ctx_, context_positions_of(B, T).view({B, T}), wpe, Tensor(), positions);
  add(ctx_, out, positions, out);
}

void GptChunk::rope_forward_backward(const Tensor& qkv, const RopeConfig& cfg, bool inverse) {
  if (cp_.enabled())
    rope_apply_at(ctx_, qkv, context_positions_of(qkv.dim(0), qkv.dim(1)), cfg, inverse);
  else
    rope_apply(ctx_, qkv, cfg, inverse);
}

}  // namespace troupe
