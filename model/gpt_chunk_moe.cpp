// GptChunk's mixture-of-experts MLP (model/moe/moe_mlp.hpp): an MoE layer runs it in place of
// fc1 -> activation -> fc2, between the pre-MLP norm and the dropout + residual add.
#include <algorithm>

#include "base/check.hpp"
#include "kernels/elementwise.hpp"
#include "model/gpt_chunk.hpp"

namespace troupe {

// Null without expert parallelism: every expert is local.
Collectives* GptChunk::expert_group() const {
  if (tp_.expert.size == 1) return nullptr;
  TROUPE_CHECK(tp_.expert_comm != nullptr, "GptChunk: expert-parallel rank ", tp_.expert.rank, " of ", tp_.expert.size,
               " has no expert group");
  return tp_.expert_comm;
}

// Null without tensor parallelism. With it the MoE MLP sees all rows of the group (gathered
// under sequence parallelism) and returns partial sums, reduced as the dense MLP's.
Collectives* GptChunk::moe_tensor_group() const { return tp_.shard.size > 1 ? tp_.comm : nullptr; }

MoeMlpParams GptChunk::moe_params(int i) const {
  MoeMlpParams p = layer_params_[size_t(i)].moe;
  if (router_f32_[size_t(i)].defined()) p.router = router_f32_[size_t(i)];
  return p;
}

void GptChunk::moe_forward(int i, ChunkActivations& a, const ForwardOptions& o, const Tensor& out) {
  LayerActivations& s = a.layers[size_t(i)];
  auto t = timed("moe.fwd");
  // The router's GEMM runs in f32 on the compute-dtype weight converted (Megatron's
  // --moe-router-dtype fp32 casts its bf16 parameter the same way): again every forward, as the
  // optimizer may have stepped since the last one. (With two lanes a backward on the other lane
  // may read the copy meanwhile: the same weights give the same bits.)
  if (router_f32_[size_t(i)].defined()) convert(ctx_, layer_params_[size_t(i)].moe.router, router_f32_[size_t(i)]);
  moe_mlp_forward(ctx_, moe_spec_, moe_params(i), moe_state_[size_t(i)], s.ln2, a.seq, o.training, s.moe, out,
                  expert_group(), moe_tensor_group(), moe_comm_, cp_.enabled() ? cp_.comm : nullptr);
  if (!o.training) return;
  const int l = layout_.first_layer() + i;
  const auto it =
      std::find_if(moe_stats_.begin(), moe_stats_.end(), [l](const MoeLayerStats& m) { return m.layer == l; });
  TROUPE_CHECK(it != moe_stats_.end(), "GptChunk: layer ", l, " has no MoE statistics");
  const MoeConfig& m = moe_spec_.moe;
  const MoeMlpStats& st = s.moe.stats;
  ++it->microbatches;
  if (m.load_balancing_coeff() > 0)
    it->load_balancing_loss += (st.losses.aux_loss + st.losses.seq_aux_loss) / m.load_balancing_coeff();
  if (m.moe_z_loss_coeff > 0) it->z_loss += st.losses.z_loss / m.moe_z_loss_coeff;
  it->tokens_per_expert_max = std::max(it->tokens_per_expert_max, st.tokens_per_expert_max);
  it->tokens_per_expert_mean += st.tokens_per_expert_mean;
  it->dropped += st.dropped;
}

void GptChunk::moe_backward(int i, const ChunkActivations& a, const Tensor& dy, const Tensor& dln2) {
  const LayerActivations& s = a.layers[size_t(i)];
  auto t = timed("moe.bwd");
  MoeComm comm = moe_comm_;
  Collectives* group = expert_group();
  if (moe_backward_group_ != nullptr) {
    group = moe_backward_group_;
    comm.comm = moe_backward_comm_;
  }
  moe_mlp_backward(ctx_, moe_spec_, moe_params(i), s.moe, s.ln2, dy, a.moe_loss_grad_scale, dln2,
                   layer_grads_[size_t(i)].moe, group, moe_tensor_group(), comm);
}

void GptChunk::set_lane(int lane) {
  TROUPE_CHECK(lane == 0 || lane == 1, "GptChunk: lane ", lane, " (0 or 1)");
  lane_ = lane;
  lanes_ = true;
}

void GptChunk::set_moe_backward_comm(Collectives* backward_expert_group, const Context* backward_comm) {
  TROUPE_CHECK(backward_expert_group == nullptr || expert_group() != nullptr,
               "GptChunk: a backward expert group without expert parallelism");
  TROUPE_CHECK(backward_expert_group == nullptr || (backward_expert_group->size() == expert_group()->size() &&
                                                    backward_expert_group->rank() == expert_group()->rank()),
               "GptChunk: the backward expert group must hold the expert group's members in its order");
  moe_backward_group_ = backward_expert_group;
  moe_backward_comm_ = backward_comm;
}

void GptChunk::update_moe_expert_bias() {
  if (!moe_spec_.moe.moe_router_enable_expert_bias) return;
  for (MoeRouterState& state : moe_state_) {
    if (!state.expert_bias.defined()) continue;
    if (ctx_.is_cuda())
      moe_update_expert_bias(ctx_, state, moe_spec_.moe.moe_router_bias_update_rate);
    else
      moe_update_expert_bias(state, moe_spec_.moe.moe_router_bias_update_rate);
  }
}

std::vector<MoeLayerStats> GptChunk::take_moe_stats() {
  std::vector<MoeLayerStats> out = moe_stats_;
  for (MoeLayerStats& m : moe_stats_) m = MoeLayerStats{.layer = m.layer};
  return out;
}

const MoeRouterState& GptChunk::moe_router_state_of(int global_layer) const {
  const int i = global_layer - layout_.first_layer();
  TROUPE_CHECK(i >= 0 && i < layout_.num_layers() && config().is_moe_layer(global_layer), "layer ", global_layer,
               " is no MoE layer of this chunk");
  return moe_state_[size_t(i)];
}

std::vector<std::pair<std::string, Tensor>> GptChunk::moe_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < moe_state_.size(); ++i)
    if (moe_state_[i].expert_bias.defined())
      out.emplace_back(moe_expert_bias_name(layout_.first_layer() + int(i)), moe_state_[i].expert_bias);
  return out;
}

std::vector<Tensor> GptChunk::moe_token_counts() const {
  std::vector<Tensor> out;
  for (const MoeRouterState& state : moe_state_)
    if (state.tokens_per_expert.defined()) out.push_back(state.tokens_per_expert);
  return out;
}

}  // namespace troupe
