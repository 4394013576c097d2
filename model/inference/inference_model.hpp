// The GPT model for inference: the training parameter layout (ParamLayout(config,
// ChunkSpec::whole_model()), the same flat weights), a forward over a flattened batch of new
// tokens from several sequences (prefills of many tokens and decode steps of one, mixed), and
// attention over a paged KV cache (model/inference/kv_cache.hpp). It reuses the training kernels
// (embedding, norms incl. the per-head q/k norms, linear, RoPE, activations) and returns the logits of each sequence's
// last new token. CPU: f32; CUDA: bf16/f16, or f32 (exact: greedy parity with an fp32 reference). On CUDA a decode step
// (one new token per sequence) is captured once per batch-size bucket (1, 2, 4, ... up to max_sequences) in a CUDA
// graph and replayed: the batch is padded to its bucket with rows that write into the cache's scratch block.
// A fresh prefill (a sequence whose new tokens, more than one, are its whole context: start 0)
// takes the training causal attention (attention_forward_any_length: our flash kernels on
// tensor cores) straight from its rows of qkv, where that kernel is fast for the compute dtype
// and head dim (attention_forward_fast); its keys and values still go into the cache. Other rows
// (decode steps, prefills continuing a cache) take paged attention (kernels/paged_attention.hpp).
// Mixture-of-experts layers run the MoE MLP (model/inference/inference_moe.hpp: dropless, one rank; the
// routing stays on the device, so their decode steps are captured and replayed like dense ones).
//
// Tensor parallelism (Megatron's, without sequence parallelism): each rank of a group holds its
// ParamLayout shard (its heads, query groups, MLP columns and vocabulary rows), a cache of its
// G / T KV heads, and runs the same forward on its own thread, with an all-reduce after the
// vocabulary-parallel embedding and after the row-parallel proj and fc2; it returns its slice
// of the vocabulary's logits. Each rank captures and replays its own decode graphs, the NCCL
// all-reduces inside them (capture is thread-local: the ranks capture at the same time).
//
//   InferenceModel model(ctx, config, DType::bf16, {.max_tokens = 2048, .max_sequences = 64});
//   model.load_weights(host_f32);                 // layout().size() elements
//   KvCache cache(ctx, config, DType::bf16, blocks, 16);
//   SequenceInput a{prompt, 0, blocks_a};          // a prefill: the prompt from position 0
//   SequenceInput b{{next}, 17, blocks_b};         // a decode step at position 17
//   std::vector<SequenceInput> batch{a, b};
//   Tensor logits = model.forward(batch, cache);  // [2, Vp] on the device
//
//   InferenceModel rank(ctx_r, config, DType::bf16, options, {{r, T}, false, group[r].get()});
//   rank.load_weights(shard_params(whole_layout, host_f32, rank.layout()));
//   KvCache cache_r(ctx_r, config, DType::bf16, blocks, 16, T);
//   Tensor mine = rank.forward(batch, cache_r);     // [2, Vp / T]: columns from layout().vocab_start()
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "kernels/cuda_graph.hpp"
#include "kernels/op_profiler.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/tensor.hpp"
#include "model/config.hpp"
#include "model/inference/inference_moe.hpp"
#include "model/inference/kv_cache.hpp"
#include "model/param_layout.hpp"
#include "model/tensor_parallel.hpp"

namespace troupe {

// One sequence's part of a forward.
struct SequenceInput {
  std::span<const int32_t> tokens;  // its new tokens (at least one)
  int64_t start = 0;                // position of tokens[0]: how many of its tokens the cache holds
  std::span<const int32_t> blocks;  // its block table: enough blocks for start + tokens.size() tokens
};

struct InferenceModelOptions {
  int64_t max_tokens = 2048;    // new tokens per forward (all sequences together)
  int64_t max_sequences = 256;  // sequences per forward
  bool cuda_graphs = true;      // replay decode steps from CUDA graphs (CUDA only)
  // Fresh prefills on the training causal attention (see above); false: every row on paged
  // attention (tests and benchmarks compare the two; the results agree to rounding).
  bool causal_prefill = true;
};

class InferenceModel {
 public:
  // compute: f32 on a CPU context; bf16, f16 or f32 on a CUDA context. tp: this rank's place in
  // its tensor-parallel group (no sequence parallelism; collectives required when size > 1).
  InferenceModel(const Context& ctx, const GptConfig& config, DType compute, InferenceModelOptions options = {},
                 TensorParallel tp = {});

  const GptConfig& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  const Context& context() const { return ctx_; }
  DType compute_dtype() const { return compute_; }
  const InferenceModelOptions& options() const { return options_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  // The longest sequence the model takes (learned positions: max_position_embeddings).
  int64_t max_sequence_length() const;

  // A host f32 buffer of layout().size() elements (as GptChunk::load_weights): this rank's shard.
  void load_weights(const Tensor& host_f32);
  // MoE with --moe-router-enable-expert-bias: layer `layer`'s learned expert bias, host f32 [E]
  // (a checkpoint's decoder.layers.N.mlp.router.expert_bias); every MoE layer needs one.
  void load_expert_bias(int layer, const Tensor& host_f32) { moe_.load_expert_bias(layer, host_f32); }

  // Writes the new tokens' keys and values into `cache` and returns the logits of each
  // sequence's last new token, [S, Vp / T] in the compute dtype on the context's device (valid
  // until the next forward): this rank's vocabulary slice, from layout().vocab_start() (all
  // of it for T = 1). Throws naming the sequence on a bad position or block table. Every rank
  // of a group calls it with the same batch.
  Tensor forward(std::span<const SequenceInput> seqs, KvCache& cache);
  // Turns the CUDA-graph path on or off (the graphs captured so far are kept).
  void set_cuda_graphs(bool on) { options_.cuda_graphs = on; }
  // Turns the causal-attention path of fresh prefills on or off (InferenceModelOptions::causal_prefill).
  void set_causal_prefill(bool on) { options_.causal_prefill = on; }
  // Graphs captured so far (one per batch-size bucket used).
  size_t cuda_graphs_captured() const { return graphs_.size(); }
  // Times every op into `profiler` (null: off); while set, forwards run op by op (no graphs).
  void set_profiler(OpProfiler* profiler) { profiler_ = profiler; }

 private:
  struct Metadata;  // the batch's index tensors on the device
  // Checks the batch and writes its index tensors into `host`, padded to `pad_to` sequences of
  // one token each (scratch-block rows) and block tables `table_width` wide (0: the widest).
  Metadata pack(std::span<const SequenceInput> seqs, const KvCache& cache, int64_t pad_to, int64_t table_width,
                std::vector<int32_t>& host);
  // Copies `host` into `device` (grown when too small) and points m's views there.
  void upload(const std::vector<int32_t>& host, Tensor& device, Metadata& m);
  // Whether q's attention runs on attention_forward: a fresh prefill of more than one token,
  // with the path on and fast for this model (a one-token prefill is a decode step's job).
  bool fresh_prefill(const SequenceInput& q) const;
  // attn = attention of the rows of qkv: paged for the first m.paged_rows, causal for each fresh prefill.
  void attention(const Metadata& m, const Tensor& qkv, const PagedAttentionConfig& pc, const Tensor& attn,
                 KvCache& cache, int l);
  void run(const Metadata& m, KvCache& cache);  // the forward's kernels, after the upload
  void layer_forward(int l, int64_t n, const Metadata& m, KvCache& cache);
  // x += moe_mlp(norm(x)) of MoE layer l; ln: [n, C] scratch for the norm.
  void moe_layer_mlp(int l, const Tensor& x, const Tensor& ln);
  // x += in w^T + b for a row-parallel linear (proj, fc2): fused into the GEMM on one rank; a
  // group's ranks sum their partial products (bias on rank 0) with an all-reduce first.
  void row_parallel_add(const Tensor& in, const Tensor& w, const Tensor& b, const Tensor& x);
  Tensor forward_graph(std::span<const SequenceInput> seqs, KvCache& cache);
  OpProfiler::Scope timed(const char* name) { return OpProfiler::Scope(profiler_, name); }

  const Context& ctx_;
  TensorParallel tp_;
  ParamLayout layout_;
  DType compute_;
  InferenceModelOptions options_;
  Tensor params_;  // [layout.size()] compute dtype
  std::vector<LayerTensors> layers_;
  OuterTensors outer_;
  InferenceMoe moe_;  // the MoE layers' MLPs (nothing for a dense model)
  // Activations for up to max_tokens rows (views of the first n rows are used).
  // Per rank: qkv_ [N, (Hl+2Gl)*D], attn_ [N, Hl*D], fc1_ [N, Fl or 2Fl], act_ [N, Fl].
  Tensor x_, ln_, qkv_, attn_, hidden_, fc1_, act_, mean_, rstd_;
  Tensor q_rstd_, k_rstd_;          // qk_layernorm: f32 [N, Hl], [N, Gl] (unused statistics)
  Tensor last_, lnf_, logits_;      // [max_sequences, C], [max_sequences, C], [max_sequences, Vp / T]
  std::vector<int32_t> host_meta_;  // staging for the index tensors (kept alive for the async copy)
  Tensor meta_;                     // i32 on the device, grown on demand
  // Fresh prefills: whether attention_forward is fast for the compute dtype and head dim, and
  // f32 [Hl * N] for the log-sum-exps it writes (unused statistics; only when fast).
  bool causal_prefill_fast_ = false;
  Tensor prefill_lse_;
  // CUDA graphs of decode steps, by padded batch size; their index tensors live at fixed
  // addresses in graph_meta_, and they are bound to one cache (graph_cache_key_: its K/V addresses).
  std::map<int64_t, CudaGraph> graphs_;
  Tensor graph_meta_;
  std::vector<int32_t> graph_host_;
  std::vector<const void*> graph_cache_key_;
  OpProfiler* profiler_ = nullptr;
};

}  // namespace troupe
