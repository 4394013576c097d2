#include "model/inference/inference_model.hpp"

#include <algorithm>

#include "base/check.hpp"
#include "kernels/attention.hpp"
#include "kernels/norm.hpp"
#include "kernels/norm_linear.hpp"
#include "kernels/ops.hpp"
#include "kernels/paged_attention.hpp"

namespace troupe {

// Views of the batch's index tensors (i32, on the device): one upload per forward.
struct InferenceModel::Metadata {
  int64_t n = 0, s = 0, width = 0;  // rows, sequences, block-table width
  Tensor tokens;                    // [1, N]
  Tensor positions;                 // [N] (as [1, N] for the position-embedding lookup)
  Tensor slots;                     // [N] cache slot of each new token
  Tensor last_rows;                 // [1, S] row of each sequence's last new token
  // Rows are laid out sequence by sequence, the paged ones first: rows [0, paged_rows) of
  // paged_seqs sequences read the cache, then each fresh prefill's rows.
  int64_t paged_rows = 0, paged_seqs = 0;
  PagedBatch paged;  // query_start [S'+1], seq_lens [S'], block_tables [S', W]: S' = paged_seqs
  struct Fresh {
    int64_t row = 0, tokens = 0;
  };
  std::vector<Fresh> fresh;  // host-side: each fresh prefill's first row and length
};

// `c`, once check_inference_moe has passed it (MoE inference is refused with TP).
static const GptConfig& checked_config(const GptConfig& c, int tensor_parallel) {
  check_inference_moe(c, tensor_parallel);
  return c;
}

InferenceModel::InferenceModel(const Context& ctx, const GptConfig& config, DType compute,
                               InferenceModelOptions options, TensorParallel tp)
    : ctx_(ctx),
      tp_(tp),
      layout_(checked_config(config, tp.shard.size), ChunkSpec::whole_model(), tp.shard),
      compute_(compute),
      options_(options),
      moe_(ctx, config, compute, options.max_tokens) {
  TROUPE_CHECK(!tp.sequence_parallel, "InferenceModel: sequence parallelism is for training only");
  TROUPE_CHECK(tp.shard.size == 1 ||
                   (tp.comm != nullptr && tp.comm->size() == tp.shard.size && tp.comm->rank() == tp.shard.rank),
               "InferenceModel: tensor-parallel rank ", tp.shard.rank, " of ", tp.shard.size,
               " needs the group's collectives");
  if (ctx.is_cuda())
    TROUPE_CHECK(is_float(compute), "InferenceModel: CUDA computes in bf16, f16 or f32, not ", dtype_name(compute));
  else
    TROUPE_CHECK(compute == DType::f32, "InferenceModel: the CPU computes in f32, not ", dtype_name(compute));
  TROUPE_CHECK(options.max_tokens > 0 && options.max_sequences > 0 && options.max_sequences <= options.max_tokens,
               "InferenceModel: needs 0 < max_sequences <= max_tokens, got ", options.max_sequences, " and ",
               options.max_tokens);
  params_ = Tensor::zeros(ctx, compute, {layout_.size()});
  for (int l = 0; l < config.num_layers; ++l) layers_.push_back(layout_.layer(params_, l));
  outer_ = layout_.outer(params_);
  const int64_t N = options.max_tokens, S = options.max_sequences, C = config.hidden_size;
  const int64_t F = layout_.local_ffn(), HD = int64_t(layout_.local_heads()) * config.head_dim();
  auto act = [&](int64_t rows, int64_t cols) { return Tensor::empty(ctx, compute, {rows, cols}); };
  x_ = act(N, C);
  ln_ = act(N, C);
  qkv_ = act(N, layout_.local_qkv_size());
  attn_ = act(N, HD);
  hidden_ = act(N, C);
  if (config.swiglu) fc1_ = act(N, 2 * F);  // GELU models apply it in fc1's epilogue
  act_ = act(N, F);
  mean_ = Tensor::empty(ctx, DType::f32, {N});
  rstd_ = Tensor::empty(ctx, DType::f32, {N});
  if (config.qk_layernorm) {
    q_rstd_ = Tensor::empty(ctx, DType::f32, {N, layout_.local_heads()});
    k_rstd_ = Tensor::empty(ctx, DType::f32, {N, layout_.local_query_groups()});
  }
  causal_prefill_fast_ = attention_forward_fast(ctx, compute, config.head_dim());
  if (causal_prefill_fast_) prefill_lse_ = Tensor::empty(ctx, DType::f32, {layout_.local_heads() * N});
  last_ = act(S, C);
  lnf_ = act(S, C);
  logits_ = act(S, layout_.local_vocab());
}

int64_t InferenceModel::max_sequence_length() const {
  const GptConfig& c = config();
  // RoPE has no table to run off; the trained length is the natural limit, as for learned positions.
  return c.max_positions();
}

void InferenceModel::load_weights(const Tensor& host_f32) {
  TROUPE_CHECK(host_f32.numel() == layout_.size() && host_f32.dtype() == DType::f32 && !host_f32.is_cuda(),
               "InferenceModel::load_weights: expected a host f32 buffer of ", layout_.size(), " elements, got ",
               host_f32.str());
  copy(ctx_, to_device(ctx_, host_f32, compute_), params_);
  moe_.load_routers(layers_);
  ctx_.synchronize();
}

InferenceModel::Metadata InferenceModel::pack(std::span<const SequenceInput> seqs, const KvCache& cache, int64_t pad_to,
                                              int64_t table_width, std::vector<int32_t>& host) {
  const int64_t real = int64_t(seqs.size()), S = std::max(real, pad_to), bs = cache.block_size();
  TROUPE_CHECK(real > 0 && S <= options_.max_sequences, "InferenceModel::forward: ", real,
               " sequences, the model takes 1 to ", options_.max_sequences);
  int64_t N = S - real, max_blocks = 1;  // padding rows: one token each
  for (int64_t i = 0; i < real; ++i) {
    const SequenceInput& q = seqs[size_t(i)];
    const int64_t len = q.start + int64_t(q.tokens.size());
    TROUPE_CHECK(!q.tokens.empty() && q.start >= 0, "InferenceModel::forward: sequence ", i, " has ", q.tokens.size(),
                 " new tokens at position ", q.start);
    TROUPE_CHECK(len <= max_sequence_length(), "InferenceModel::forward: sequence ", i, " reaches ", len,
                 " tokens, the model takes at most ", max_sequence_length(), " (max_position_embeddings)");
    TROUPE_CHECK(int64_t(q.blocks.size()) >= cache.blocks_for(len), "InferenceModel::forward: sequence ", i, " has ",
                 q.blocks.size(), " cache blocks, ", len, " tokens need ", cache.blocks_for(len));
    N += int64_t(q.tokens.size());
    max_blocks = std::max<int64_t>(max_blocks, cache.blocks_for(len));
  }
  TROUPE_CHECK(N <= options_.max_tokens, "InferenceModel::forward: ", N, " new tokens, the model takes at most ",
               options_.max_tokens, " per forward");
  const int64_t W = table_width > 0 ? table_width : max_blocks;
  TROUPE_CHECK(max_blocks <= W, "InferenceModel::forward: a sequence needs ", max_blocks, " blocks, tables hold ", W);
  const int64_t vocab = config().vocab_size;
  const int32_t scratch = cache.scratch_block();
  // [tokens N | positions N | slots N | query_start S+1 | seq_lens S | last_rows S | tables S*W]
  // query_start, seq_lens and tables follow the row order (the paged sequences first); last_rows
  // the batch's.
  host.assign(size_t(3 * N + 3 * S + 1 + S * W), scratch);
  int32_t* tokens = host.data();
  int32_t* positions = tokens + N;
  int32_t* slots = positions + N;
  int32_t* query_start = slots + N;
  int32_t* seq_lens = query_start + S + 1;
  int32_t* last_rows = seq_lens + S;
  int32_t* tables = last_rows + S;
  std::vector<int64_t> order;  // sequences in row order: the paged ones (padding included), then the fresh
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t i = 0; i < S; ++i)
      if (int(i < real && fresh_prefill(seqs[size_t(i)])) == pass) order.push_back(i);
  Metadata m;
  int64_t row = 0;
  for (int64_t k = 0; k < S; ++k) {
    const int64_t i = order[size_t(k)];
    query_start[k] = int32_t(row);
    if (i >= real) {  // padding: token 0 at position 0 in the scratch block
      tokens[row] = 0;
      positions[row] = 0;
      slots[row] = int32_t(scratch * bs);
      seq_lens[k] = 1;
      last_rows[i] = int32_t(row++);
      continue;
    }
    const SequenceInput& q = seqs[size_t(i)];
    if (fresh_prefill(q)) m.fresh.push_back({row, int64_t(q.tokens.size())});
    for (size_t j = 0; j < q.tokens.size(); ++j, ++row) {
      const int64_t pos = q.start + int64_t(j);
      TROUPE_CHECK(q.tokens[j] >= 0 && q.tokens[j] < vocab, "InferenceModel::forward: sequence ", i, " token ", j,
                   " is ", q.tokens[j], ", outside the vocabulary of ", vocab);
      tokens[row] = q.tokens[j];
      positions[row] = int32_t(pos);
      slots[row] = int32_t(q.blocks[size_t(pos / bs)] * bs + pos % bs);
    }
    seq_lens[k] = int32_t(q.start + int64_t(q.tokens.size()));
    last_rows[i] = int32_t(row - 1);
    std::copy_n(q.blocks.begin(), cache.blocks_for(seq_lens[k]), tables + k * W);
  }
  query_start[S] = int32_t(N);
  m.n = N;
  m.s = S;
  m.width = W;
  m.paged_seqs = S - int64_t(m.fresh.size());
  m.paged_rows = m.fresh.empty() ? N : m.fresh.front().row;
  return m;
}

bool InferenceModel::fresh_prefill(const SequenceInput& q) const {
  return options_.causal_prefill && causal_prefill_fast_ && q.start == 0 && q.tokens.size() > 1;
}

void InferenceModel::upload(const std::vector<int32_t>& host, Tensor& device, Metadata& m) {
  const int64_t size = int64_t(host.size()), N = m.n, S = m.s;
  if (!device.defined() || device.numel() < size) device = Tensor::empty(ctx_, DType::i32, {size});
  copy(ctx_, Tensor::wrap(const_cast<int32_t*>(host.data()), DType::i32, {size}, DeviceKind::cpu),
       device.slice(0, {size}));
  m.tokens = device.slice(0, {1, N});
  m.positions = device.slice(N, {N});
  m.slots = device.slice(2 * N, {N});
  m.paged.query_start = device.slice(3 * N, {m.paged_seqs + 1});
  m.paged.seq_lens = device.slice(3 * N + S + 1, {m.paged_seqs});
  m.last_rows = device.slice(3 * N + 2 * S + 1, {1, S});
  m.paged.block_tables = device.slice(3 * N + 3 * S + 1, {m.paged_seqs, m.width});
}

// The first `n` rows of a [max, cols] activation.
static Tensor rows(const Tensor& t, int64_t n) { return t.slice(0, {n, t.dim(1)}); }

// The config's norm with weights w (and b, LayerNorm's), for norm_linear_forward.
static NormWeights norm_weights(const GptConfig& c, const Tensor& w, const Tensor& b) {
  const bool layernorm = c.normalization == Normalization::layernorm;
  return {layernorm ? NormKind::layernorm : NormKind::rmsnorm, w, layernorm ? b : Tensor(), c.norm_epsilon};
}

Tensor InferenceModel::forward(std::span<const SequenceInput> seqs, KvCache& cache) {
  TROUPE_CHECK(cache.dtype() == compute_, "InferenceModel::forward: the cache holds ", dtype_name(cache.dtype()),
               ", the model computes in ", dtype_name(compute_));
  TROUPE_CHECK(cache.query_groups() == layout_.local_query_groups(), "InferenceModel::forward: the cache holds ",
               cache.query_groups(), " KV heads per layer, this rank has ", layout_.local_query_groups(),
               " (a cache for another tensor-parallel size?)");
  const bool decode =
      std::all_of(seqs.begin(), seqs.end(), [](const SequenceInput& q) { return q.tokens.size() == 1; });
  const bool graphs = ctx_.is_cuda() && options_.cuda_graphs && !profiler_;
  if (graphs && decode && !seqs.empty()) return forward_graph(seqs, cache);
  Metadata m = pack(seqs, cache, 0, 0, host_meta_);
  upload(host_meta_, meta_, m);
  run(m, cache);
  return rows(logits_, m.s);
}

Tensor InferenceModel::forward_graph(std::span<const SequenceInput> seqs, KvCache& cache) {
  std::vector<const void*> key;  // graphs hold the cache's addresses
  for (int l = 0; l < config().num_layers; ++l) key.insert(key.end(), {cache.k(l).data(), cache.v(l).data()});
  if (key != graph_cache_key_) {
    graphs_.clear();
    graph_cache_key_ = std::move(key);
  }
  int64_t bucket = 1;
  while (bucket < int64_t(seqs.size())) bucket *= 2;
  bucket = std::min(bucket, options_.max_sequences);
  // Fixed block-table width: every sequence the model takes fits.
  const int64_t width = cache.blocks_for(max_sequence_length());
  Metadata m = pack(seqs, cache, bucket, width, graph_host_);
  const int64_t S = options_.max_sequences, size = 6 * S + 1 + S * width;
  if (!graph_meta_.defined() || graph_meta_.numel() < size) {  // room for the largest bucket: a fixed address
    graph_meta_ = Tensor::empty(ctx_, DType::i32, {size});
    graphs_.clear();
  }
  upload(graph_host_, graph_meta_, m);
  auto it = graphs_.find(bucket);
  if (it != graphs_.end()) {
    it->second.launch(ctx_);
  } else {
    // The first step of a bucket runs op by op (lazy initializations, e.g. of cuBLASLt plans,
    // happen outside the capture), then is captured for the next ones: capturing runs nothing.
    run(m, cache);
    graphs_.emplace(bucket, CudaGraph::capture(ctx_, [&] { run(m, cache); }));
  }
  return rows(logits_, int64_t(seqs.size()));
}

void InferenceModel::run(const Metadata& m, KvCache& cache) {
  const GptConfig& c = config();
  const int64_t n = m.n, C = c.hidden_size;
  const Tensor x = rows(x_, n);
  {
    auto t = timed("embedding");
    if (tp_.shard.size == 1) {
      embedding_forward(ctx_, m.tokens, outer_.wte, Tensor(), x.view({1, n, C}));
    } else {  // each rank looks up its vocabulary rows (zeros for the others' tokens)
      embedding_forward(ctx_, m.tokens, outer_.wte, Tensor(), x.view({1, n, C}), 0,
                        VocabShard{true, layout_.vocab_start()});
      tp_.comm->all_reduce(ctx_, x);
    }
    if (outer_.wpe.defined()) {
      const Tensor pos = rows(hidden_, n);
      embedding_forward(ctx_, m.positions.view({1, n}), outer_.wpe, Tensor(), pos.view({1, n, C}));
      add(ctx_, x, pos, x);
    }
  }
  for (int l = 0; l < c.num_layers; ++l) layer_forward(l, n, m, cache);
  // The last new token of each sequence: a row gather (the embedding lookup, with x as the table).
  const Tensor last = rows(last_, m.s), lnf = rows(lnf_, m.s), logits = rows(logits_, m.s);
  {
    auto t = timed("last_rows");
    embedding_forward(ctx_, m.last_rows, x, Tensor(), last.view({1, m.s, C}));
  }
  // Decode-size batches: the final norm inside the LM head's GEMV (kernels/norm_linear.hpp).
  auto t = timed("lnf+lm_head");
  norm_linear_forward(ctx_, last, norm_weights(c, outer_.lnf_w, outer_.lnf_b), outer_.output, Tensor(), logits, false,
                      {lnf, mean_.slice(0, {m.s}), rstd_.slice(0, {m.s})});
}

void InferenceModel::layer_forward(int l, int64_t n, const Metadata& m, KvCache& cache) {
  const GptConfig& c = config();
  const LayerTensors& w = layers_[size_t(l)];
  const int H = layout_.local_heads(), G = layout_.local_query_groups(), D = c.head_dim();
  const Tensor x = rows(x_, n), ln = rows(ln_, n), qkv = rows(qkv_, n), attn = rows(attn_, n);
  const Tensor act = rows(act_, n);
  const PagedAttentionConfig pc{H, G, D, cache.block_size(), 0.0f, c.sliding_window};

  // x += proj(attention(rope(qk_norm(qkv(norm(x)))))): the residual add happens in the GEMM;
  // at decode-size batches the norm happens inside the qkv GEMV (kernels/norm_linear.hpp), as
  // the one in front of fc1 does inside fc1's.
  const NormScratch scratch{ln, mean_.slice(0, {n}), rstd_.slice(0, {n})};
  {
    auto t = timed("ln1+qkv");
    norm_linear_forward(ctx_, x, norm_weights(c, w.ln1_w, w.ln1_b), w.qkv_w, w.qkv_b, qkv, false, scratch);
  }
  if (c.qk_layernorm) {  // each query and key head normalized in place, before RoPE
    auto t = timed("qk_norm");
    rmsnorm_heads_forward(ctx_, qkv, w.q_norm, c.norm_epsilon, {0, H}, qkv, rows(q_rstd_, n));
    rmsnorm_heads_forward(ctx_, qkv, w.k_norm, c.norm_epsilon, {H, G}, qkv, rows(k_rstd_, n));
  }
  if (c.position_embedding_type == PositionEmbedding::rope) {
    auto t = timed("rope");
    rope_apply_at(ctx_, qkv.view({1, n, qkv.dim(1)}), m.positions, {H, G, D, c.rotary_base, 0, c.rope_scaling}, false);
  }
  attention(m, qkv, pc, attn, cache, l);
  {
    auto t = timed("proj");
    row_parallel_add(attn, w.proj_w, w.proj_b, x);
  }

  if (c.is_moe_layer(l)) {
    moe_layer_mlp(l, x, ln);
    return;
  }
  // x += fc2(act(fc1(norm(x))))
  const NormWeights ln2 = norm_weights(c, w.ln2_w, w.ln2_b);
  if (c.swiglu) {
    const Tensor fc1 = rows(fc1_, n);
    {
      auto t = timed("ln2+fc1");
      norm_linear_forward(ctx_, x, ln2, w.fc1_w, w.fc1_b, fc1, false, scratch);
    }
    {
      auto t = timed("activation");
      swiglu_forward(ctx_, fc1, act);
    }
  } else {  // GELU in the GEMM's epilogue
    auto t = timed("ln2+fc1+gelu");
    norm_linear_forward(ctx_, x, ln2, w.fc1_w, w.fc1_b, act, /*gelu=*/true, scratch);
  }
  {
    auto t = timed("fc2");
    row_parallel_add(act, w.fc2_w, w.fc2_b, x);
  }
}

void InferenceModel::attention(const Metadata& m, const Tensor& qkv, const PagedAttentionConfig& pc, const Tensor& attn,
                               KvCache& cache, int l) {
  if (m.paged_rows > 0) {  // the rows' K and V go into the cache in the same kernel
    auto t = timed("attention");
    paged_append_attention(ctx_, rows(qkv, m.paged_rows), pc, m.slots.slice(0, {m.paged_rows}), m.paged, cache.k(l),
                           cache.v(l), rows(attn, m.paged_rows));
  }
  if (m.fresh.empty()) return;
  {
    auto t = timed("kv_append");
    const int64_t first = m.paged_rows, fresh_rows = m.n - first;
    paged_kv_append(ctx_, qkv.slice(first * qkv.dim(1), {fresh_rows, qkv.dim(1)}), pc,
                    m.slots.slice(first, {fresh_rows}), cache.k(l), cache.v(l));
  }
  // A fresh prefill's rows are its whole sequence from position 0: the causal attention of
  // training over them is the paged attention of those rows (same scale, f32 softmax, window).
  // Prompt lengths vary per request: kernels without a plan per length.
  auto t = timed("prefill_attention");
  const AttentionConfig ac{pc.n_heads, pc.n_kv_heads, pc.head_dim, pc.scale, pc.window};
  const int64_t qkv_width = qkv.dim(1), out_width = attn.dim(1);
  for (const Metadata::Fresh& f : m.fresh)
    attention_forward_any_length(ctx_, qkv.slice(f.row * qkv_width, {1, f.tokens, qkv_width}), ac,
                                 attn.slice(f.row * out_width, {1, f.tokens, out_width}),
                                 prefill_lse_.slice(0, {1, pc.n_heads, f.tokens}));
}

void InferenceModel::moe_layer_mlp(int l, const Tensor& x, const Tensor& ln) {
  const GptConfig& c = config();
  const LayerTensors& w = layers_[size_t(l)];
  const int64_t n = x.dim(0);
  {
    auto t = timed("ln2");
    if (c.normalization == Normalization::layernorm)
      layernorm_forward(ctx_, x, w.ln2_w, w.ln2_b, c.norm_epsilon, ln, mean_.slice(0, {n}), rstd_.slice(0, {n}));
    else
      rmsnorm_forward(ctx_, x, w.ln2_w, c.norm_epsilon, ln, rstd_.slice(0, {n}));
  }
  const Tensor y = rows(hidden_, n);
  {
    auto t = timed("moe");
    moe_.forward(l, w.moe, ln, y);
  }
  auto t = timed("moe_residual");
  add(ctx_, x, y, x);
}

void InferenceModel::row_parallel_add(const Tensor& in, const Tensor& w, const Tensor& b, const Tensor& x) {
  if (tp_.shard.size == 1) {
    linear_forward(ctx_, in, w, b, x, /*accumulate=*/true);
    return;
  }
  const Tensor partial = rows(hidden_, x.dim(0));
  linear_forward(ctx_, in, w, tp_.shard.rank == 0 ? b : Tensor(), partial);
  tp_.comm->all_reduce(ctx_, partial);
  add(ctx_, x, partial, x);
}

}  // namespace troupe
