#include "model/gpt_chunk.hpp"

#include <algorithm>

#include "base/check.hpp"
#include "kernels/ops.hpp"
#include "kernels/op_profiler.hpp"
#include "kernels/stream_fence.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"
#include "model/config_moe.hpp"
#include "model/fp8/fp8_linears.hpp"

namespace troupe {

// Temporaries of one microbatch shape, reused by every layer and microbatch: the chunk
// runs one op at a time on its stream, so nothing here outlives the op sequence using it.
struct GptChunk::Scratch {
  int64_t batch = 0, seq = 0;
  Tensor hidden;        // [N, C]  a projection's output (partial sums under TP) before dropout + residual add
  Tensor hidden_local;  // [N/TP, C] its reduce-scattered rows (sequence parallelism)
  Tensor dres;          // [rows, C] gradient of the residual stream (this rank's rows)
  Tensor dlocal;        // [rows, C] a dropped-out gradient / reduce-scattered norm gradient
  Tensor dfull;         // [N, C]  all rows of a gradient (sequence parallelism)
  Tensor dhidden;       // [N, C]  gradient of a norm's output (partial sums under TP)
  Tensor dattn;         // [N, H*D / TP]
  Tensor dqkv;          // [N, (H+2G)*D / TP]
  Tensor dfc1;          // [N, (F or 2F) / TP]
  Tensor dact;          // [N, F / TP]
  Tensor row_max, sum_exp, target_logit;  // f32 [N] vocabulary-parallel loss
  // Activation recompute's workspace (model/recompute.hpp): a slot per layer of the longest
  // recomputed group. recomputed_residual[k]: the input of the group's layer k (k > 0); [0]: where
  // the group's last layer writes its output again, leaving the kept one as it is.
  std::vector<LayerActivations> recomputed;
  std::vector<Tensor> recomputed_residual;  // [rows, C] each
};

GptChunk::GptChunk(const Context& ctx, const GptConfig& config, const ChunkSpec& spec, DType compute, TensorParallel tp,
                   int64_t buffer_multiple, const RecomputeConfig& recompute)
    : ctx_(ctx),
      tp_(tp),
      layout_(config, spec, tp.shard, tp.expert, tp.expert.size > 1 ? buffer_multiple : 1),
      compute_(compute) {
  if (ctx.is_cuda())
    TROUPE_CHECK(compute == DType::bf16 || compute == DType::f16, "CUDA model chunks compute in bf16 or f16, not ",
                 dtype_name(compute));
  else
    TROUPE_CHECK(compute == DType::f32, "CPU model chunks compute in f32, not ", dtype_name(compute));
  TROUPE_CHECK(tp.shard.size == 1 ||
                   (tp.comm != nullptr && tp.comm->size() == tp.shard.size && tp.comm->rank() == tp.shard.rank),
               "GptChunk: tensor-parallel rank ", tp.shard.rank, " of ", tp.shard.size,
               " needs the group's collectives");
  TROUPE_CHECK(buffer_multiple >= 1, "GptChunk: buffer multiple ", buffer_multiple);
  const int64_t size = (layout_.size() + buffer_multiple - 1) / buffer_multiple * buffer_multiple;
  params_ = Tensor::zeros(ctx, compute, {size});
  grads_ = Tensor::zeros(ctx, DType::f32, {size});
  for (int i = 0; i < layout_.num_layers(); ++i) {
    layer_params_.push_back(layout_.layer(params_, layout_.first_layer() + i));
    layer_grads_.push_back(layout_.layer(grads_, layout_.first_layer() + i));
  }
  outer_params_ = layout_.outer(params_);
  outer_grads_ = layout_.outer(grads_);
  if (config.moe.enabled()) {
    // Recomputing an MoE layer would route its tokens twice (counting them twice for the expert
    // bias and the statistics); selective recompute of attention and the norms leaves it alone.
    TROUPE_CHECK(recompute.granularity != RecomputeGranularity::full,
                 "--recompute-granularity full with --num-experts is not implemented: recompute an MoE model "
                 "selectively (--recompute-modules core_attn layernorm)");
    TROUPE_CHECK(!recompute.modules.mlp,
                 "--recompute-modules mlp with --num-experts is not implemented (the MoE MLP keeps its "
                 "activations): use core_attn or layernorm");
    moe_spec_ = moe_mlp_spec(config);
    moe_state_.resize(size_t(layout_.num_layers()));
    router_f32_.resize(size_t(layout_.num_layers()));
    for (int i = 0; i < layout_.num_layers(); ++i) {
      const int l = layout_.first_layer() + i;
      if (!config.is_moe_layer(l)) continue;
      moe_state_[size_t(i)] = ctx.is_cuda() ? moe_router_state(ctx, config.moe) : moe_router_state(config.moe);
      if (compute != DType::f32)
        router_f32_[size_t(i)] = Tensor::empty(ctx, DType::f32, layer_params_[size_t(i)].moe.router.shape());
      moe_stats_.push_back(MoeLayerStats{.layer = l});
    }
  }
  recompute_ = recompute;
  recompute_plan_ = recompute_plan(recompute, layout_.num_layers());
  // Which gradients are final at each point of backward: the output layer and final norm
  // first, then layer by layer from the last; the embedding (and a tied copy) only at the end.
  const int L = layout_.num_layers();
  pending_.assign(size_t(L) + 1, size);
  for (const ParamInfo& p : layout_.params()) {
    int first_pending = -1;  // pending_[k] for k > first_pending includes this parameter
    if (p.name.rfind("embedding.", 0) == 0) {
      first_pending = -1;
    } else if (p.name.rfind("decoder.layers.", 0) == 0) {
      first_pending = std::stoi(p.name.substr(15)) - layout_.first_layer();
    } else {
      continue;  // output layer, final norm: final after the output part
    }
    for (int k = first_pending + 1; k <= L; ++k) pending_[size_t(k)] = std::min(pending_[size_t(k)], p.offset);
  }
}

GptChunk::~GptChunk() = default;

void GptChunk::zero_grads() { fill_zero(ctx_, grads_); }

Shape GptChunk::hidden_shape(int64_t batch, int64_t seq) const {
  const int64_t C = config().hidden_size;
  if (!sharded_rows()) return {batch, seq, C};
  return {batch * seq / tp_.shard.size, C};
}

void GptChunk::reduce_tensor_parallel_grads() {
  if (tp_.shard.size == 1) return;
  for (const ParamInfo& p : layout_.params())
    if (p.partial_grad || (p.norm && sharded_rows())) tp_.comm->all_reduce(ctx_, grads_.slice(p.offset, {p.numel()}));
}

void GptChunk::init_weights(uint64_t seed) {
  Tensor host = Tensor::host(DType::f32, {layout_.size()});
  init_params(layout_, seed, host);
  load_weights(host);
}

void GptChunk::load_weights(const Tensor& host_f32) {
  TROUPE_CHECK(host_f32.numel() == layout_.size() && host_f32.dtype() == DType::f32 && !host_f32.is_cuda(),
               "load_weights: expected a host f32 buffer of ", layout_.size(), " elements, got ", host_f32.str());
  Tensor dev = to_device(ctx_, host_f32, compute_);
  copy(ctx_, dev, params_.slice(0, {layout_.size()}));
  ctx_.synchronize();
}

Tensor GptChunk::device_tokens(const Tensor& t) {
  expect_dtype("GptChunk", "tokens", t, DType::i32);
  if (t.device() == ctx_.kind()) return t;
  return to_device(ctx_, t, DType::i32);
}

Tensor GptChunk::rows_of(const Tensor& full) const {
  if (!sharded_rows()) return full;
  const int64_t n = local_rows(full.dim(0)), w = full.dim(1);
  return full.slice(int64_t(tp_.shard.rank) * n * w, {n, w});
}

Tensor GptChunk::reduce_rows(const Tensor& partial, const Tensor& local_dst) {
  if (tp_.shard.size == 1) return partial;
  if (!sharded_rows()) {
    tp_.comm->all_reduce(ctx_, partial);
    return partial;
  }
  tp_.comm->reduce_scatter(ctx_, partial, local_dst);
  return local_dst;
}

Tensor GptChunk::gather_rows(const Tensor& local, const Tensor& full_dst) {
  if (!sharded_rows()) return local;
  tp_.comm->all_gather(ctx_, local, full_dst);
  return full_dst;
}

uint64_t GptChunk::row_offset(int64_t n, int64_t width) const {
  return sharded_rows() ? uint64_t(tp_.shard.rank) * uint64_t(local_rows(n) * width) : 0;
}

GptChunk::Scratch& GptChunk::scratch(int64_t batch, int64_t seq) {
  std::unique_ptr<Scratch>& scratch = scratch_[size_t(lane_)];
  if (scratch && scratch->batch == batch && scratch->seq == seq) return *scratch;
  const GptConfig& c = config();
  const int64_t n = batch * seq, C = c.hidden_size, F = layout_.local_ffn(), rows = local_rows(n);
  auto s = std::make_unique<Scratch>();
  s->batch = batch;
  s->seq = seq;
  s->hidden = Tensor::empty(ctx_, compute_, {n, C});
  if (sharded_rows()) {
    s->hidden_local = Tensor::empty(ctx_, compute_, {rows, C});
    s->dfull = Tensor::empty(ctx_, compute_, {n, C});
  }
  s->dres = Tensor::empty(ctx_, compute_, {rows, C});
  s->dlocal = Tensor::empty(ctx_, compute_, {rows, C});
  s->dhidden = Tensor::empty(ctx_, compute_, {n, C});
  s->dattn = Tensor::empty(ctx_, compute_, {n, int64_t(layout_.local_heads()) * c.head_dim()});
  s->dqkv = Tensor::empty(ctx_, compute_, {n, layout_.local_qkv_size()});
  s->dfc1 = Tensor::empty(ctx_, compute_, {n, c.swiglu ? 2 * F : F});
  s->dact = Tensor::empty(ctx_, compute_, {n, F});
  if (tp_.shard.size > 1 && layout_.spec().post_process) {
    s->row_max = Tensor::empty(ctx_, DType::f32, {n});
    s->sum_exp = Tensor::empty(ctx_, DType::f32, {n});
    s->target_logit = Tensor::empty(ctx_, DType::f32, {n});
  }
  for (const LayerRecompute& p : recompute_plan_) {
    if (!p.tensors.any()) continue;
    if (size_t(p.slot) >= s->recomputed.size()) s->recomputed.resize(size_t(p.slot) + 1);
    if (p.full && size_t(p.slot) >= s->recomputed_residual.size()) s->recomputed_residual.resize(size_t(p.slot) + 1);
  }
  for (size_t slot = 0; slot < s->recomputed.size(); ++slot) {
    RecomputedTensors used;  // by every layer of this slot
    for (const LayerRecompute& p : recompute_plan_)
      if (size_t(p.slot) == slot) used.add(p.tensors);
    s->recomputed[slot] = layer_activations(batch, seq, used, true);
  }
  for (Tensor& r : s->recomputed_residual) r = Tensor::empty(ctx_, compute_, {rows, C});
  scratch = std::move(s);
  return *scratch;
}

ActivationsPtr GptChunk::acquire(int64_t batch, int64_t seq) {
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if ((*it)->batch == batch && (*it)->seq == seq) {
      ActivationsPtr a = std::move(*it);
      pool_.erase(it);
      // Two lanes: the backward that released the set may still run on the other lane.
      fence_wait(ctx_, a->released);
      a->released.reset();
      for (LayerActivations& l : a->layers) l.moe = MoeMlpActivations{};  // sized by each forward's routing
      return a;
    }
  }
  const int64_t n = batch * seq, C = config().hidden_size, rows = local_rows(n);
  auto a = std::make_unique<ChunkActivations>();
  a->batch = batch;
  a->seq = seq;
  auto act = [&](Shape s) { return Tensor::empty(ctx_, compute_, std::move(s)); };
  auto f32 = [&](Shape s) { return Tensor::empty(ctx_, DType::f32, std::move(s)); };
  const int L = layout_.num_layers();
  for (int i = 0; i <= L; ++i)  // full recompute keeps only each group's input
    a->residual.push_back(i < L && recompute_plan_[size_t(i)].tensors.input ? Tensor() : act({rows, C}));
  for (int i = 0; i < L; ++i) {
    a->layers.push_back(layer_activations(batch, seq, recompute_plan_[size_t(i)].tensors, false));
    if (config().is_moe_layer(layout_.first_layer() + i)) a->layers.back().fc1 = a->layers.back().act = Tensor();
  }
  if (layout_.spec().post_process) {
    a->lnf = act({n, C});
    a->lnf_mean = f32({rows});
    a->lnf_rstd = f32({rows});
    a->logits = act({n, layout_.local_vocab()});
    a->losses = f32({n});
  }
  return a;
}

LayerActivations GptChunk::layer_activations(int64_t batch, int64_t seq, const RecomputedTensors& which,
                                             bool recomputed) {
  const GptConfig& c = config();
  const int64_t n = batch * seq, C = c.hidden_size, F = layout_.local_ffn(), H = layout_.local_heads();
  const int64_t rows = local_rows(n);
  auto act = [&](Shape s) { return Tensor::empty(ctx_, compute_, std::move(s)); };
  auto f32 = [&](Shape s) { return Tensor::empty(ctx_, DType::f32, std::move(s)); };
  LayerActivations l;
  if (which.ln1 == recomputed) {
    l.ln1 = act({n, C});  // all rows: the column-parallel GEMM's input
    l.ln1_mean = f32({rows});
    l.ln1_rstd = f32({rows});
  }
  if (which.qkv == recomputed) {
    l.qkv = act({n, layout_.local_qkv_size()});
    if (c.qk_layernorm) {
      l.qk = act({n, (H + layout_.local_query_groups()) * c.head_dim()});
      l.q_rstd = f32({n, H});
      l.k_rstd = f32({n, layout_.local_query_groups()});
    }
  }
  if (which.core_attn == recomputed) {
    l.attn = act({n, H * c.head_dim()});
    l.lse = f32({batch, H, seq});
  }
  if (which.x_mid == recomputed) l.x_mid = act({rows, C});
  if (which.ln2 == recomputed) {
    l.ln2 = act({n, C});
    l.ln2_mean = f32({rows});
    l.ln2_rstd = f32({rows});
  }
  if (which.mlp == recomputed) {
    l.fc1 = act({n, c.swiglu ? 2 * F : F});
    l.act = act({n, F});
  }
  return l;
}

void GptChunk::bind_recomputed(int i, ChunkActivations& a) {
  const LayerRecompute& p = recompute_plan_[size_t(i)];
  if (!p.tensors.any()) return;
  Scratch& tmp = scratch(a.batch, a.seq);
  assign_recomputed(p.tensors, tmp.recomputed[size_t(p.slot)], a.layers[size_t(i)]);
  if (p.tensors.input) a.residual[size_t(i)] = tmp.recomputed_residual[size_t(p.slot)];
  if (p.tensors.output) a.residual[size_t(i) + 1] = tmp.recomputed_residual[size_t(p.slot) + 1];
}

void GptChunk::unbind_recomputed(int i, ChunkActivations& a) {
  const LayerRecompute& p = recompute_plan_[size_t(i)];
  if (!p.tensors.any()) return;
  assign_recomputed(p.tensors, LayerActivations{}, a.layers[size_t(i)]);
  if (p.tensors.input) a.residual[size_t(i)] = Tensor();
  if (p.tensors.output) a.residual[size_t(i) + 1] = Tensor();
}

// Before layer i's backward (layers run backward from the last): full recompute runs the forward
// of layer i's whole group when its last layer comes first; selective recompute the named
// modules. The same ops, collectives and dropout counters as the forward, so the same bits.
void GptChunk::recompute_layer(int i, ChunkActivations& a) {
  const LayerRecompute& p = recompute_plan_[size_t(i)];
  if (!p.tensors.any()) return;
  if (p.full) {
    if (i != p.group_end - 1) return;  // the group was recomputed at its last layer
    const ForwardOptions o{.training = true, .dropout_seed = a.dropout_seed};
    Tensor& output = a.residual[size_t(p.group_end)];
    const Tensor kept = output;  // the next group's input (or the chunk's output) stays untouched
    output = scratch(a.batch, a.seq).recomputed_residual[0];
    for (int j = p.group_begin; j < p.group_end; ++j) {
      bind_recomputed(j, a);
      layer_forward(j, a, o);
    }
    output = kept;
    return;
  }
  bind_recomputed(i, a);
  const LayerTensors& w = layer_params_[size_t(i)];
  LayerActivations& s = a.layers[size_t(i)];
  if (p.tensors.ln1) {
    auto t = timed("ln1.fwd");
    norm_gather_forward(a.residual[size_t(i)], w.ln1_w, w.ln1_b, s.ln1, s.ln1_mean, s.ln1_rstd);
  }
  if (p.tensors.core_attn) {
    auto t = timed("attention.fwd");
    core_attention_forward(s, a.batch, a.seq);
  }
  if (p.tensors.ln2) {
    auto t = timed("ln2.fwd");
    norm_gather_forward(s.x_mid, w.ln2_w, w.ln2_b, s.ln2, s.ln2_mean, s.ln2_rstd);
  }
  if (p.tensors.mlp) mlp_activation_forward(i, w, s, /*training=*/true, {}, /*cast_for_fc2=*/false);
}

void GptChunk::release(ActivationsPtr acts) {
  if (!acts) return;
  for (int i = 0; i < layout_.num_layers(); ++i) unbind_recomputed(i, *acts);  // after a backward that threw
  acts->tokens = Tensor();
  acts->targets = Tensor();
  // One lane: the MoE tensors go now. Two: they were made on the forward's lane, and freeing them
  // there now could hand their memory to that lane's next op while this backward still reads
  // them; acquire() frees them behind the fence.
  if (lanes_)
    acts->released = fence_record(ctx_);
  else
    for (LayerActivations& l : acts->layers) l.moe = MoeMlpActivations{};
  acts->has_grad = false;
  acts->weight_grads_pending = false;
  pool_.push_back(std::move(acts));
}

void GptChunk::norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
                            const Tensor& rstd, const Fp8SideOutput& fp8) {
  const float eps = config().norm_epsilon;
  if (config().normalization == Normalization::layernorm)
    layernorm_forward(ctx_, x, w, b, eps, y, mean, rstd, fp8);
  else
    rmsnorm_forward(ctx_, x, w, eps, y, rstd, fp8);
}

void GptChunk::norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                             const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dx_in) {
  if (config().normalization == Normalization::layernorm)
    layernorm_backward(ctx_, dy, x, w, mean, rstd, dx, dw, db, dx_in);
  else
    rmsnorm_backward(ctx_, dy, x, w, rstd, dx, dw, dx_in);
}

namespace {
// Each dropout site gets its own counter range so masks never repeat within a microbatch:
// site 0 is the embedding, layer l uses sites 1 + 2l (attention) and 2 + 2l (MLP).
uint64_t dropout_offset(int site, int64_t rows, int64_t hidden) { return uint64_t(site) * uint64_t(rows * hidden); }
}  // namespace

// This rank's rows of a [batch, seq] microbatch, x -> y, at dropout site `site`. Under context
// parallelism the local rows are runs of the sequences' global rows (model/context_parallel.hpp):
// each run draws the counters of the same rows in a single-device run, so the masks are the same.
void GptChunk::site_dropout(bool backward, const Tensor& x, const Tensor& y, int site, uint64_t seed, int64_t batch,
                            int64_t seq) {
  const float p = config().hidden_dropout;
  const int64_t n = batch * seq, C = config().hidden_size;
  const auto apply = [&](const Tensor& in, const Tensor& out, uint64_t offset) {
    if (backward)
      dropout_backward(ctx_, in, out, p, seed, offset);
    else
      dropout_forward(ctx_, in, out, p, seed, offset);
  };
  if (!cp_.enabled()) {
    apply(x, y, dropout_offset(site, n, C) + row_offset(n, C));
    return;
  }
  const int64_t global_seq = seq * cp_.size, first = int64_t(row_offset(n, C)) / C, end = first + local_rows(n);
  const uint64_t base = dropout_offset(site, batch * global_seq, C);
  for (int64_t r = first; r < end;) {
    const int64_t b = r / seq, t = r % seq;
    const int64_t len = std::min((t < seq / 2 ? seq / 2 : seq) - t, end - r);  // to the end of t's chunk
    const int64_t g = b * global_seq + context_position(cp_, seq, t);
    apply(x.slice((r - first) * C, {len, C}), y.slice((r - first) * C, {len, C}), base + uint64_t(g * C));
    r += len;
  }
}

ActivationsPtr GptChunk::forward(const Tensor& input, const Tensor& targets, const Tensor& output,
                                 const ForwardOptions& o) {
  const GptConfig& c = config();
  const ChunkSpec& spec = layout_.spec();
  const bool tp = tp_.shard.size > 1;
  const bool rows_input = !spec.pre_process && sharded_rows();
  TROUPE_CHECK(!rows_input || (o.batch > 0 && o.seq > 0),
               "forward: sequence-parallel hidden rows need the microbatch shape in the options");
  const int64_t B = rows_input ? o.batch : input.dim(0), T = rows_input ? o.seq : input.dim(1), C = c.hidden_size;
  TROUPE_CHECK(T <= c.seq_length || c.position_embedding_type == PositionEmbedding::rope, "forward: sequence length ",
               T, " exceeds --seq-length ", c.seq_length);
  TROUPE_CHECK(!sharded_rows() || (B * T) % tp_.shard.size == 0, "sequence parallelism: the ", B * T,
               " tokens of a microbatch do not split over ", tp_.shard.size, " tensor-parallel ranks");
  ActivationsPtr a = acquire(B, T);
  a->dropout_seed = o.dropout_seed;
  a->moe_loss_grad_scale = o.moe_loss_grad_scale;
  a->has_grad = o.training;
  const OuterTensors& p = outer_params_;

  if (spec.pre_process) {
    a->tokens = device_tokens(input);
    expect_shape("GptChunk::forward", "tokens", a->tokens, {B, T});
    {
      auto t = timed("embedding.fwd");
      if (!tp) {
        embedding_forward(ctx_, a->tokens, p.wte, cp_.enabled() ? Tensor() : p.wpe, a->residual[0].view({B, T, C}));
        if (cp_.enabled()) add_context_position_embedding(a->residual[0].view({B, T, C}));
      } else {
        // Each rank looks up its vocabulary rows (zeros elsewhere); rank 0 adds the positions.
        Scratch& tmp = scratch(B, T);
        embedding_forward(ctx_, a->tokens, p.wte, tp_.shard.rank == 0 && !cp_.enabled() ? p.wpe : Tensor(),
                          tmp.hidden.view({B, T, C}), 0, VocabShard{true, layout_.vocab_start()});
        if (cp_.enabled() && tp_.shard.rank == 0) add_context_position_embedding(tmp.hidden.view({B, T, C}));
        copy(ctx_, reduce_rows(tmp.hidden, a->residual[0]), a->residual[0]);
      }
    }
    if (o.training && c.hidden_dropout > 0)
      site_dropout(false, a->residual[0], a->residual[0], 0, o.dropout_seed, B, T);
  } else {
    expect_shape("GptChunk::forward", "input", input, hidden_shape(a->batch, a->seq));
    expect_dtype("GptChunk::forward", "input", input, compute_);
    copy(ctx_, input, a->residual[0]);
  }

  for (int i = 0; i < layout_.num_layers(); ++i) {
    const StreamSpanScope layer(layer_spans_, ctx_, SpanKind::layer);
    bind_recomputed(i, *a);
    layer_forward(i, *a, o);
    unbind_recomputed(i, *a);
  }

  const Tensor& x_out = a->residual[size_t(layout_.num_layers())];
  if (!spec.post_process) {
    expect_shape("GptChunk::forward", "output", output, hidden_shape(a->batch, a->seq));
    copy(ctx_, x_out, output);
    return a;
  }
  {
    auto t = timed("lnf.fwd");
    norm_forward(x_out, p.lnf_w, p.lnf_b, rows_of(a->lnf), a->lnf_mean, a->lnf_rstd);
    gather_rows(rows_of(a->lnf), a->lnf);
  }
  {
    auto t = timed("lm_head.fwd");
    linear_forward(ctx_, a->lnf, p.output, Tensor(), a->logits);
  }
  if (targets.defined()) {
    a->targets = device_tokens(targets);
    expect_shape("GptChunk::forward", "targets", a->targets, {a->batch, a->seq});
    auto t = timed("cross_entropy");
    loss(*a, o);
  } else {
    TROUPE_CHECK(!o.training, "forward: a training forward of the last chunk needs targets");
  }
  return a;
}

void GptChunk::loss(ChunkActivations& a, const ForwardOptions& o) {
  const GptConfig& c = config();
  const int64_t n = a.rows();
  const Tensor flat_targets = a.targets.view({n});
  if (tp_.shard.size == 1) {
    if (o.training)
      cross_entropy_forward_backward(ctx_, a.logits, flat_targets, c.vocab_size, o.loss_grad_scale, a.losses);
    else
      cross_entropy_forward(ctx_, a.logits, flat_targets, c.vocab_size, a.losses);
    return;
  }
  // Vocabulary-parallel: global row max, then the global softmax denominator and target logit.
  Scratch& tmp = scratch(a.batch, a.seq);
  const int64_t start = layout_.vocab_start();
  const int64_t valid = std::clamp(c.vocab_size - start, int64_t(0), layout_.local_vocab());
  vocab_parallel_max(ctx_, a.logits, valid, tmp.row_max);
  tp_.comm->all_reduce(ctx_, tmp.row_max, ReduceOp::max);
  vocab_parallel_sum_exp(ctx_, a.logits, flat_targets, start, valid, tmp.row_max, tmp.sum_exp, tmp.target_logit);
  tp_.comm->all_reduce(ctx_, tmp.sum_exp);
  tp_.comm->all_reduce(ctx_, tmp.target_logit);
  vocab_parallel_loss(ctx_, a.logits, flat_targets, start, valid, tmp.row_max, tmp.sum_exp, tmp.target_logit,
                      o.loss_grad_scale, o.training, a.losses);
}

void GptChunk::layer_forward(int i, ChunkActivations& a, const ForwardOptions& o) {
  const GptConfig& c = config();
  const int l = layout_.first_layer() + i;
  const LayerTensors& w = layer_params_[size_t(i)];
  LayerActivations& s = a.layers[size_t(i)];
  Scratch& tmp = scratch(a.batch, a.seq);
  const int64_t B = a.batch, T = a.seq;
  const Tensor& x = a.residual[size_t(i)];
  const Tensor& y = a.residual[size_t(i) + 1];
  const bool drop = o.training && c.hidden_dropout > 0;
  const bool rank0 = tp_.shard.rank == 0;  // adds the row-parallel biases (once, before the reduction)
  const int Hl = layout_.local_heads(), Gl = layout_.local_query_groups();

  // Attention block: x_mid = x + dropout(proj(attention(rope(qk_norm(qkv(norm(x)))))))
  // FP8: ln1 writes qkv's input cast in its pass.
  const Fp8SideOutput qkv_cast = layer_input_cast(i, LayerLinear::qkv, s.ln1, o.training);
  {
    auto t = timed("ln1.fwd");
    norm_gather_forward(x, w.ln1_w, w.ln1_b, s.ln1, s.ln1_mean, s.ln1_rstd, qkv_cast);
  }
  {
    auto t = timed("qkv.fwd");
    layer_linear_forward(i, LayerLinear::qkv, s.ln1, w.qkv_w, w.qkv_b, s.qkv, o.training, qkv_cast);
  }
  if (c.qk_layernorm) {
    auto t = timed("qk_norm.fwd");
    qk_norm_forward(w, s);
  }
  const Tensor qkv3 = s.qkv.view({B, T, int64_t(layout_.local_qkv_size())});
  if (c.position_embedding_type == PositionEmbedding::rope) {
    auto t = timed("rope.fwd");
    rope_forward_backward(qkv3, {Hl, Gl, c.head_dim(), c.rotary_base, 0, c.rope_scaling}, false);
  }
  {
    auto t = timed("attention.fwd");
    core_attention_forward(s, B, T);
  }
  // Without dropout or a tensor-parallel reduction in between, the residual add is the GEMM's C
  // (not in FP8: its GEMM takes no C).
  const bool residual_in_gemm = !drop && tp_.shard.size == 1 && !fp8_;
  Tensor h;
  if (residual_in_gemm) {
    auto t = timed("proj.fwd");
    linear_residual_forward(ctx_, s.attn, w.proj_w, w.proj_b, x, s.x_mid);
  } else {
    {
      auto t = timed("proj.fwd");
      layer_linear_forward(i, LayerLinear::proj, s.attn, w.proj_w, rank0 ? w.proj_b : Tensor(), tmp.hidden, o.training);
      h = reduce_rows(tmp.hidden, tmp.hidden_local);
    }
    if (drop) site_dropout(false, h, h, 1 + 2 * l, o.dropout_seed, B, T);
    auto t = timed("residual.fwd");
    add(ctx_, x, h, s.x_mid);
  }

  // MLP block: y = x_mid + dropout(fc2(act(fc1(norm(x_mid)))))
  const Fp8SideOutput fc1_cast =
      c.is_moe_layer(l) ? Fp8SideOutput{} : layer_input_cast(i, LayerLinear::fc1, s.ln2, o.training);
  {
    auto t = timed("ln2.fwd");
    norm_gather_forward(s.x_mid, w.ln2_w, w.ln2_b, s.ln2, s.ln2_mean, s.ln2_rstd, fc1_cast);
  }
  if (c.is_moe_layer(l)) {
    moe_forward(i, a, o, tmp.hidden);
    h = reduce_rows(tmp.hidden, tmp.hidden_local);
  } else {
    const Fp8SideOutput fc2_cast = mlp_activation_forward(i, w, s, o.training, fc1_cast, /*cast_for_fc2=*/true);
    auto t = timed("fc2.fwd");
    if (residual_in_gemm) {
      linear_residual_forward(ctx_, s.act, w.fc2_w, w.fc2_b, s.x_mid, y);
      return;
    }
    layer_linear_forward(i, LayerLinear::fc2, s.act, w.fc2_w, rank0 ? w.fc2_b : Tensor(), tmp.hidden, o.training,
                         fc2_cast);
    h = reduce_rows(tmp.hidden, tmp.hidden_local);
  }
  if (drop) site_dropout(false, h, h, 2 + 2 * l, o.dropout_seed, B, T);
  {
    auto t = timed("residual.fwd");
    add(ctx_, s.x_mid, h, y);
  }
}

// y_full: all rows of the norm's output (the column-parallel GEMM's input); this rank's rows
// normalized, then gathered under sequence parallelism.
void GptChunk::norm_gather_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y_full,
                                   const Tensor& mean, const Tensor& rstd, const Fp8SideOutput& fp8) {
  TROUPE_CHECK(!fp8.any() || !sharded_rows(), "norm_gather_forward: an FP8 side output under sequence parallelism");
  norm_forward(x, w, b, rows_of(y_full), mean, rstd, fp8);
  gather_rows(rows_of(y_full), y_full);
}

// s.attn and s.lse from s.qkv (after the q/k norms and RoPE).
void GptChunk::core_attention_forward(LayerActivations& s, int64_t batch, int64_t seq) {
  const GptConfig& c = config();
  const AttentionConfig ac{layout_.local_heads(), layout_.local_query_groups(), c.head_dim(), 0.0f, c.sliding_window};
  if (cp_.enabled()) {  // the ring over the context group (model/context_parallel.hpp)
    context_attention_forward(ctx_, cp_, s.qkv.view({batch, seq, int64_t(layout_.local_qkv_size())}), ac,
                              s.attn.view({batch, seq, s.attn.dim(1)}), s.lse);
    return;
  }
  attention_forward(ctx_, s.qkv.view({batch, seq, int64_t(layout_.local_qkv_size())}), ac,
                    s.attn.view({batch, seq, s.attn.dim(1)}), s.lse);
}

// s.fc1 and s.act from s.ln2: the MLP up to its second GEMM.
Fp8SideOutput GptChunk::mlp_activation_forward(int i, const LayerTensors& w, LayerActivations& s, bool training,
                                               const Fp8SideOutput& fc1_cast, bool cast_for_fc2) {
  // The GELU in fc1's GEMM epilogue on CUDA (kernels/linear_fused.hpp); in FP8 a separate op.
  if (!config().swiglu && !fp8_) {
    auto t = timed("fc1.fwd");
    linear_gelu_aux_forward(ctx_, s.ln2, w.fc1_w, w.fc1_b, s.fc1, s.act);
    return {};
  }
  {
    auto t = timed("fc1.fwd");
    layer_linear_forward(i, LayerLinear::fc1, s.ln2, w.fc1_w, w.fc1_b, s.fc1, training, fc1_cast);
  }
  auto t = timed("act.fwd");
  if (config().swiglu) {
    swiglu_forward(ctx_, s.fc1, s.act);
    return {};
  }
  // FP8: the GELU writes fc2's input cast (asked for after fc1's forward: they share scratch).
  Fp8SideOutput fc2_cast = cast_for_fc2 ? layer_input_cast(i, LayerLinear::fc2, s.act, training) : Fp8SideOutput{};
  gelu_forward(ctx_, s.fc1, s.act, fc2_cast);
  return fc2_cast;
}

// Each query head with the q weight, each key head with the k weight (Megatron's q_layernorm and
// k_layernorm, HF Qwen3's q_norm and k_norm), before RoPE; the values are untouched. Every rank
// normalizes its own heads: the norms work within a head, so sharding heads changes nothing.
void GptChunk::qk_norm_forward(const LayerTensors& w, LayerActivations& s) {
  const int64_t H = layout_.local_heads(), G = layout_.local_query_groups(), D = config().head_dim();
  const float eps = config().norm_epsilon;
  copy_columns(ctx_, s.qkv, 0, s.qk, 0, (H + G) * D);
  rmsnorm_heads_forward(ctx_, s.qk, w.q_norm, eps, {0, H}, s.qkv, s.q_rstd);
  rmsnorm_heads_forward(ctx_, s.qk, w.k_norm, eps, {H, G}, s.qkv, s.k_rstd);
}

void GptChunk::qk_norm_backward(const LayerTensors& w, const LayerTensors& g, const LayerActivations& s,
                                const Tensor& dqkv) {
  const int64_t H = layout_.local_heads(), G = layout_.local_query_groups();
  rmsnorm_heads_backward(ctx_, dqkv, s.qk, w.q_norm, s.q_rstd, {0, H}, dqkv, g.q_norm);
  rmsnorm_heads_backward(ctx_, dqkv, s.qk, w.k_norm, s.k_rstd, {H, G}, dqkv, g.k_norm);
}

void GptChunk::backward(ChunkActivations& a, const Tensor& doutput, const Tensor& dinput) {
  TROUPE_CHECK(a.has_grad, "backward: these activations come from a forward without training=true");
  backward_pass(a, doutput, dinput, /*defer_weight_grads=*/false);
}

void GptChunk::backward_pass(ChunkActivations& a, const Tensor& doutput, const Tensor& dinput,
                             bool defer_weight_grads) {
  const bool defer = defer_weight_grads;
  const GptConfig& c = config();
  const ChunkSpec& spec = layout_.spec();
  const int64_t B = a.batch, T = a.seq;
  Scratch& tmp = scratch(B, T);
  const OuterTensors& p = outer_params_;
  const OuterTensors& g = outer_grads_;

  if (spec.post_process) {
    // a.logits holds dlogits (the loss wrote them during forward).
    Tensor dln;
    {
      auto t = timed("lm_head.bwd");
      // Deferred: a.logits (dlogits) stays in the activations until backward_weight.
      linear_backward_fused(a.logits, a.lnf, p.output, tmp.dhidden, defer ? Tensor() : g.output, Tensor());
      dln = reduce_rows(tmp.dhidden, tmp.dlocal);
    }
    fill_zero(ctx_, tmp.dres);
    {
      auto t = timed("lnf.bwd");
      norm_backward(dln, a.residual[size_t(layout_.num_layers())], p.lnf_w, a.lnf_mean, a.lnf_rstd, tmp.dres, g.lnf_w,
                    g.lnf_b);
    }
  } else {
    expect_shape("GptChunk::backward", "doutput", doutput, hidden_shape(B, T));
    copy(ctx_, doutput, tmp.dres);
  }
  if (!defer) grads_ready(pending_[size_t(layout_.num_layers())]);

  for (int i = layout_.num_layers() - 1; i >= 0; --i) {
    const StreamSpanScope layer(layer_spans_, ctx_, SpanKind::layer);
    recompute_layer(i, a);
    layer_backward(i, a, defer);
    unbind_recomputed(i, a);
    if (!defer) grads_ready(pending_[size_t(i)]);
  }

  if (spec.pre_process) {
    if (c.hidden_dropout > 0) site_dropout(true, tmp.dres, tmp.dres, 0, a.dropout_seed, B, T);
    const Tensor dout = gather_rows(tmp.dres, tmp.dfull);
    if (defer) {
      keep_output_gradient(dout, tmp.dres, a.dembedding);  // nothing reads tmp.dres after
    } else {
      const StreamSpanScope weight_part(weight_spans(), ctx_, SpanKind::weight_gradient);
      embedding_weight_backward(a, dout);
    }
  } else {
    expect_shape("GptChunk::backward", "dinput", dinput, hidden_shape(B, T));
    copy(ctx_, tmp.dres, dinput);
  }
  if (!defer) grads_ready(grads_.numel());
  a.has_grad = false;
  a.weight_grads_pending = defer;
}

void GptChunk::embedding_weight_backward(const ChunkActivations& a, const Tensor& dout) {
  auto t = timed("embedding.bwd");
  const int64_t B = a.batch, T = a.seq, C = config().hidden_size;
  const OuterTensors& g = outer_grads_;
  const Tensor dwpe = cp_.enabled() ? Tensor() : g.wpe;  // by global position below
  if (tp_.shard.size == 1)
    embedding_backward(ctx_, a.tokens, dout.view({B, T, C}), g.wte, dwpe);
  else
    embedding_backward(ctx_, a.tokens, dout.view({B, T, C}), g.wte, dwpe, 0, VocabShard{true, layout_.vocab_start()});
  if (cp_.enabled() && g.wpe.defined())
    embedding_backward(ctx_, context_positions_of(B, T).view({B, T}), dout.view({B, T, C}), g.wpe, Tensor());
}

void GptChunk::layer_backward(int i, ChunkActivations& a, bool defer_weight_grads) {
  const GptConfig& c = config();
  const int l = layout_.first_layer() + i;
  const LayerTensors& w = layer_params_[size_t(i)];
  // Deferred (backward_input): undefined weight and bias gradients, the GEMMs' output gradients kept.
  const bool defer = defer_weight_grads;
  LayerTensors norm_grads_only;
  if (defer) {
    norm_grads_only = layer_grads_[size_t(i)];
    for (Tensor* t : {&norm_grads_only.qkv_w, &norm_grads_only.qkv_b, &norm_grads_only.proj_w, &norm_grads_only.proj_b,
                      &norm_grads_only.fc1_w, &norm_grads_only.fc1_b, &norm_grads_only.fc2_w, &norm_grads_only.fc2_b})
      *t = Tensor();
  }
  const LayerTensors& g = defer ? norm_grads_only : layer_grads_[size_t(i)];
  LayerActivations& s = a.layers[size_t(i)];
  LayerActivations* kept = defer ? &s : nullptr;  // B's state for W
  Scratch& tmp = scratch(a.batch, a.seq);
  const int64_t B = a.batch, T = a.seq;
  const bool drop = c.hidden_dropout > 0;
  const int Hl = layout_.local_heads(), Gl = layout_.local_query_groups();
  // tmp.dres holds d(loss)/d(y) on entry and d(loss)/d(x) on exit (this rank's rows).

  // MLP block.
  Tensor dy = tmp.dres;
  if (drop) {
    site_dropout(true, tmp.dres, tmp.dlocal, 2 + 2 * l, a.dropout_seed, B, T);
    dy = tmp.dlocal;
  }
  Tensor dln;
  // Deferred: where the norms' backward read the residual gradient from when B kept it for W
  // (keep_output_gradient); undefined: tmp.dres, added to in place.
  Tensor ln2_dres_in, ln1_dres_in;
  if (c.is_moe_layer(l)) {
    moe_backward(i, a, gather_rows(dy, tmp.dfull), tmp.dhidden);
    dln = reduce_rows(tmp.dhidden, tmp.dlocal);
  } else {
    // Deferred: fc1's output gradient is written straight into the activations W reads (no copy).
    const Tensor dfc1 = defer ? kept_like(tmp.dfc1, s.dfc1) : tmp.dfc1;
    // The GELU's backward fused with fc2's input gradient (kernels/linear_fused.hpp), which also
    // makes fc1's bias gradient, unless fc1's weight-gradient work is timed apart (weight spans:
    // the bias gradient belongs to it) or deferred (undefined here: W makes it).
    const bool gelu_fused = !c.swiglu && !fp8_;
    const Tensor fc1_db_with_gelu = gelu_fused && weight_spans() == nullptr ? g.fc1_b : Tensor();
    {
      auto t = timed("fc2.bwd");
      const Tensor dfc2 = gather_rows(dy, tmp.dfull);
      if (gelu_fused) {
        linear_backward_fused(dfc2, s.act, w.fc2_w, Tensor(), g.fc2_w, g.fc2_b);
        linear_input_grad_dgelu(ctx_, dfc2, w.fc2_w, s.fc1, dfc1, fc1_db_with_gelu);
      } else {
        layer_linear_backward(i, LayerLinear::fc2, dfc2, s.act, w.fc2_w, tmp.dact, g.fc2_w, g.fc2_b, kept);
      }
      if (defer) ln2_dres_in = keep_output_gradient(dfc2, tmp.dres, s.dfc2);
    }
    if (c.swiglu) {
      auto t = timed("act.bwd");
      swiglu_backward(ctx_, tmp.dact, s.fc1, dfc1);
    } else if (fp8_) {
      auto t = timed("act.bwd");
      gelu_backward(ctx_, tmp.dact, s.fc1, dfc1);
    }
    auto t = timed("fc1.bwd");
    layer_linear_backward(i, LayerLinear::fc1, dfc1, s.ln2, w.fc1_w, tmp.dhidden, g.fc1_w,
                          fc1_db_with_gelu.defined() ? Tensor() : g.fc1_b, kept);
    dln = reduce_rows(tmp.dhidden, tmp.dlocal);
  }
  {
    auto t = timed("ln2.bwd");
    norm_backward(dln, s.x_mid, w.ln2_w, s.ln2_mean, s.ln2_rstd, tmp.dres, g.ln2_w, g.ln2_b, ln2_dres_in);
  }

  // Attention block.
  dy = tmp.dres;
  if (drop) {
    site_dropout(true, tmp.dres, tmp.dlocal, 1 + 2 * l, a.dropout_seed, B, T);
    dy = tmp.dlocal;
  }
  {
    auto t = timed("proj.bwd");
    const Tensor dproj = gather_rows(dy, tmp.dfull);
    layer_linear_backward(i, LayerLinear::proj, dproj, s.attn, w.proj_w, tmp.dattn, g.proj_w, g.proj_b, kept);
    if (defer) ln1_dres_in = keep_output_gradient(dproj, tmp.dres, s.dproj);
  }
  const int64_t qkv_cols = layout_.local_qkv_size();
  const Tensor qkv3 = s.qkv.view({B, T, qkv_cols});
  // Deferred: the attention's input gradient is written straight into the activations W reads.
  const Tensor dqkv = defer ? kept_like(tmp.dqkv, s.dqkv) : tmp.dqkv;
  const Tensor dqkv3 = dqkv.view({B, T, qkv_cols});
  const AttentionConfig ac{Hl, Gl, c.head_dim(), 0.0f, c.sliding_window};
  {
    auto t = timed("attention.bwd");
    if (cp_.enabled())
      context_attention_backward(ctx_, cp_, tmp.dattn.view({B, T, tmp.dattn.dim(1)}), qkv3,
                                 s.attn.view({B, T, s.attn.dim(1)}), s.lse, ac, dqkv3);
    else
      attention_backward(ctx_, tmp.dattn.view({B, T, tmp.dattn.dim(1)}), qkv3, s.attn.view({B, T, s.attn.dim(1)}),
                         s.lse, ac, dqkv3);
  }
  if (c.position_embedding_type == PositionEmbedding::rope) {
    auto t = timed("rope.bwd");
    rope_forward_backward(dqkv3, {Hl, Gl, c.head_dim(), c.rotary_base, 0, c.rope_scaling}, true);
  }
  if (c.qk_layernorm) {
    auto t = timed("qk_norm.bwd");
    qk_norm_backward(w, g, s, dqkv);
  }
  {
    auto t = timed("qkv.bwd");
    layer_linear_backward(i, LayerLinear::qkv, dqkv, s.ln1, w.qkv_w, tmp.dhidden, g.qkv_w, g.qkv_b, kept);
    dln = reduce_rows(tmp.dhidden, tmp.dlocal);
  }
  {
    auto t = timed("ln1.bwd");
    norm_backward(dln, a.residual[size_t(i)], w.ln1_w, s.ln1_mean, s.ln1_rstd, tmp.dres, g.ln1_w, g.ln1_b, ln1_dres_in);
  }
}

}  // namespace troupe

namespace troupe {

void GptChunk::enable_fp8(const Fp8Recipe& recipe) {
  TROUPE_CHECK(recipe.enabled, "enable_fp8: the recipe is off");
  TROUPE_CHECK(!config().moe.enabled(),
               "--fp8-format with --num-experts is not implemented: the experts' grouped GEMMs have no FP8 path");
  fp8_ = std::make_unique<Fp8Linears>(ctx_, recipe, 4 * layout_.num_layers(),
                                      std::vector<Collectives*>{tp_.comm, cp_.enabled() ? cp_.comm : nullptr});
}

void GptChunk::fp8_update_scales(const std::vector<Collectives*>& more_groups) {
  if (!fp8_) return;
  std::vector<Collectives*> groups = more_groups;
  groups.insert(groups.begin(), tp_.comm);
  fp8_->update_scales(groups);
}

Fp8SideOutput GptChunk::layer_input_cast(int i, LayerLinear which, const Tensor& x_full, bool training) {
  // Under sequence parallelism the norms write this rank's rows; fc2's input (the GELU's) is whole.
  if (!fp8_ || (which != LayerLinear::fc2 && sharded_rows())) return {};
  return fp8_->input_cast(4 * i + int(which), x_full.shape(), training);
}

void GptChunk::layer_linear_forward(int i, LayerLinear which, const Tensor& x, const Tensor& w, const Tensor& b,
                                    const Tensor& y, bool training, const Fp8SideOutput& x_cast) {
  if (fp8_)
    fp8_->forward(4 * i + int(which), x, w, b, y, training, x_cast);
  else
    linear_forward(ctx_, x, w, b, y);
}

void GptChunk::layer_linear_backward(int i, LayerLinear which, const Tensor& dy, const Tensor& x, const Tensor& w,
                                     const Tensor& dx, const Tensor& dw, const Tensor& db, LayerActivations* deferred) {
  if (!fp8_) {
    linear_backward_fused(dy, x, w, dx, dw, db);
  } else if (deferred) {
    Tensor& scales = deferred->fp8_wgrad_scales;
    // Per linear of the layer: Fp8Linears' [kWgradScales, kFp8ScaleRow] (16-byte aligned rows).
    constexpr int64_t per_linear = Fp8Linears::kWgradScales * kFp8ScaleRow;
    if (!scales.defined()) scales = Tensor::empty(ctx_, DType::f32, {4 * per_linear});
    fp8_->backward_input(4 * i + int(which), dy, x, w, dx,
                         scales.slice(per_linear * int(which), {Fp8Linears::kWgradScales, kFp8ScaleRow}));
  } else {
    fp8_->backward(4 * i + int(which), dy, x, w, dx, dw, db);
  }
}

void GptChunk::linear_backward_fused(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                                     const Tensor& dw, const Tensor& db) {
  StreamSpans* spans = weight_spans();
  if (spans == nullptr || (!dw.defined() && !db.defined())) {
    linear_backward(ctx_, dy, x, w, dx, dw, db);
    return;
  }
  if (dx.defined()) linear_backward(ctx_, dy, x, w, dx, Tensor(), Tensor());
  const StreamSpanScope weight_part(spans, ctx_, SpanKind::weight_gradient);
  linear_backward(ctx_, dy, x, w, Tensor(), dw, db);
}

void GptChunk::layer_linear_weight_backward(int i, LayerLinear which, const Tensor& dy, const Tensor& x,
                                            const Tensor& w, const Tensor& dw, const Tensor& db,
                                            const LayerActivations& deferred) {
  constexpr int64_t per_linear = Fp8Linears::kWgradScales * kFp8ScaleRow;
  if (fp8_)
    fp8_->backward_weight(
        4 * i + int(which), dy, x, w, dw, db,
        deferred.fp8_wgrad_scales.slice(per_linear * int(which), {Fp8Linears::kWgradScales, kFp8ScaleRow}));
  else
    linear_backward(ctx_, dy, x, w, Tensor(), dw, db);
}

}  // namespace troupe
