// Where every parameter of a model chunk lives in one flat buffer.
//
// A chunk (the unit a pipeline stage runs) keeps all its parameters in one contiguous
// buffer, and its gradients in a second buffer with the same offsets, so gradient buckets
// and checkpoint shards are plain slices. As in Megatron's DDP buffers, parameters are laid
// out in REVERSE forward order (output layer first, embedding last): the order backward
// produces their gradients. Each parameter starts at a multiple of 64 elements.
//
// Names follow Megatron-Core: embedding.word_embeddings.weight,
// decoder.layers.3.self_attention.linear_qkv.weight, decoder.final_layernorm.weight, ...
// Layer numbers are global (a chunk holding layers 4..7 names them 4..7).
//
// An MoE layer (GptConfig::is_moe_layer) has, in place of mlp.linear_fc1/linear_fc2:
// mlp.router.weight [E, C], mlp.experts.E.linear_fc1.weight [F1, C] and
// mlp.experts.E.linear_fc2.weight [C, F] per expert (Megatron's sequential-MLP names without
// local_experts: global, whole-model tensors, one per expert), and with a shared expert
// mlp.shared_experts.linear_fc1.weight, linear_fc2.weight (and gate_weight [1, C]).
// Under expert parallelism (ExpertShard) a chunk holds only its E / EP experts, still under their
// global names (a checkpoint by name stays the whole model's).
// The router weight lives in the compute-dtype buffer like every weight (bf16 on a GPU) and is
// converted to f32 for the routing GEMM, as Megatron's --moe-router-dtype fp32 casts its bf16
// parameter; its gradient, like every gradient, is f32.
//
// Under tensor parallelism (Megatron's layout) a chunk holds its rank's shard of each weight:
// column-parallel weights (linear_qkv by head group, linear_fc1, the word embedding and output
// layer by vocabulary rows) split their rows, row-parallel weights (linear_proj, linear_fc2)
// their columns (each MoE expert's and the shared expert's fc1 and fc2 the same way); norms (the
// q/k norms too), position embeddings, row-parallel biases, the MoE router and shared gate are
// replicated. ParamInfo
// says where the shard lies in the global tensor, so initialization, checkpoints and export
// work on global tensors whatever the layout.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw.hpp"
#include "kernels/tensor.hpp"
#include "model/config.hpp"
#include "model/moe/moe_mlp.hpp"

namespace troupe {

// The word embedding, and the output layer when it is not tied to it. With tied embeddings
// and several pipeline stages the last stage holds a copy of the embedding under the
// embedding's name, whose gradient is summed with the first stage's.
inline constexpr const char* kWordEmbeddingName = "embedding.word_embeddings.weight";
inline constexpr const char* kOutputLayerName = "output_layer.weight";

// Which part of the model a chunk holds (Megatron's pre_process / post_process).
struct ChunkSpec {
  int first_layer = 0;
  int num_layers = -1;       // -1: all layers from first_layer on
  bool pre_process = true;   // holds the embedding
  bool post_process = true;  // holds the final norm, output layer and loss
  static ChunkSpec whole_model() { return {}; }
};

// This chunk's place in its tensor-parallel group.
struct TensorShard {
  int rank = 0;
  int size = 1;  // --tensor-model-parallel-size
};

// This chunk's place in its expert-parallel group: of each MoE layer's E experts it holds
// [rank * E / size, (rank + 1) * E / size), under their global names.
struct ExpertShard {
  int rank = 0;
  int size = 1;  // --expert-model-parallel-size
};

enum class ParamInit { normal, scaled_normal, zeros, ones };

struct ParamInfo {
  std::string name;
  Shape shape;         // this rank's shard
  int64_t offset = 0;  // elements into the flat buffer
  bool decay = true;   // weight decay applies (not to biases and norm weights)
  ParamInit init = ParamInit::normal;
  bool norm = false;  // a norm weight/bias (its gradient is partial per rank under sequence parallelism)
  // Replicated, but each tensor-parallel rank's gradient is partial (the q/k norm weights cover
  // only the rank's own heads; the MoE shared expert's gate sees the rank's partial output):
  // summed over the group whether or not sequence parallelism is on.
  bool partial_grad = false;
  Shape global_shape;  // the whole parameter across the tensor-parallel group
  int split_dim = -1;  // -1: every tensor-parallel rank holds all of it
  // (global start, length) along split_dim, concatenated in this order into the shard.
  std::vector<std::pair<int64_t, int64_t>> pieces;
  int64_t numel() const { return shape_numel(shape); }
  int64_t global_numel() const { return shape_numel(global_shape); }
  bool replicated() const { return split_dim < 0; }
};

// Copies a shard out of the global tensor (row-major f32) / back into it. `global_rows`
// clips dim 0 of the global tensor (-1: its full extent): the vocabulary padding grows with
// the tensor-parallel size, and a destination padded for a smaller size drops the extra rows
// (which no token reaches); a source with fewer rows leaves those shard rows untouched.
void shard_from_global(const ParamInfo& p, const float* global, float* shard, int64_t global_rows = -1);
void shard_to_global(const ParamInfo& p, const float* shard, float* global, int64_t global_rows = -1);

// Views of one transformer layer's parameters (or gradients) in a flat buffer.
// Tensors that the config does not have (biases, LayerNorm bias) are undefined.
struct LayerTensors {
  Tensor ln1_w, ln1_b;    // [C]
  Tensor qkv_w, qkv_b;    // [(H+2G)*D, C], [(H+2G)*D]
  Tensor q_norm, k_norm;  // [D] each (qk_layernorm): self_attention.q_layernorm / k_layernorm
  Tensor proj_w, proj_b;  // [C, H*D], [C]
  Tensor ln2_w, ln2_b;    // [C]
  Tensor fc1_w, fc1_b;    // [F or 2F (swiglu: [gate; up]), C]
  Tensor fc2_w, fc2_b;    // [C, F], [C]
  // An MoE layer instead of fc1/fc2 (undefined there): the router [E, C] (compute dtype in the
  // params buffer), fc1 [E, F1, C], fc2 [E, C, F], the shared expert.
  MoeMlpParams moe;
};

// "decoder.layers.3.mlp." + expert 5 + "linear_fc1" -> "decoder.layers.3.mlp.experts.5.linear_fc1.weight"
std::string moe_expert_name(const std::string& mlp_prefix, int expert, const char* linear);

// Views of the embedding and head parameters (undefined where the chunk lacks them).
struct OuterTensors {
  Tensor wte;           // [Vp, C] embedding.word_embeddings.weight
  Tensor wpe;           // [P, C]  embedding.position_embeddings.weight (learned_absolute)
  Tensor lnf_w, lnf_b;  // [C] decoder.final_layernorm
  Tensor output;        // [Vp, C] output_layer.weight, or the tied wte
};

class ParamLayout {
 public:
  // Throws naming the sizes when the model does not split over `tp` ranks.
  // `expert_run_multiple` (1, or a multiple of 64): each MoE layer's run of routed experts
  // starts and ends at a multiple of it (padding before and after), so the distributed
  // optimizer can shard that run over the expert-data-parallel group and the rest over every
  // data rank (Megatron keeps the experts in a buffer of their own).
  ParamLayout(const GptConfig& config, const ChunkSpec& spec, TensorShard tp = {}, ExpertShard ep = {},
              int64_t expert_run_multiple = 1);

  const GptConfig& config() const { return config_; }
  const ChunkSpec& spec() const { return spec_; }
  const TensorShard& tensor_shard() const { return tp_; }
  const ExpertShard& expert_shard() const { return ep_; }
  // MoE: the experts this chunk holds, [first_local_expert(), + local_experts()).
  int local_experts() const { return config_.moe.num_experts / ep_.size; }
  int first_local_expert() const { return local_experts() * ep_.rank; }
  // Whether `name` is a routed expert's weight (mlp.experts.N.*): under expert parallelism its
  // gradient is reduced over the expert-data-parallel group, not the data-parallel one.
  static bool is_expert_param(const std::string& name);
  // The [begin, end) runs of the flat buffer that hold routed experts, one per MoE layer, in
  // buffer order (each to the next parameter's offset: the padding goes with it).
  std::vector<std::pair<int64_t, int64_t>> expert_runs() const;
  // Per-rank sizes under tensor parallelism.
  int local_heads() const { return config_.num_attention_heads / tp_.size; }
  int local_query_groups() const { return config_.query_groups() / tp_.size; }
  int local_qkv_size() const { return (local_heads() + 2 * local_query_groups()) * config_.head_dim(); }
  int local_ffn() const { return config_.ffn() / tp_.size; }
  int64_t padded_vocab() const { return config_.padded_vocab_size(tp_.size); }  // global
  int64_t local_vocab() const { return padded_vocab() / tp_.size; }
  int64_t vocab_start() const { return local_vocab() * tp_.rank; }
  int first_layer() const { return spec_.first_layer; }
  int num_layers() const { return num_layers_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  // Total elements of the flat buffer (padding included).
  int64_t size() const { return size_; }
  bool has(const std::string& name) const;
  const ParamInfo& find(const std::string& name) const;  // throws naming the parameter
  // One AdamW segment per parameter.
  std::vector<ParamSegment> segments() const;

  // Views into a flat buffer of size() elements (params or grads, any dtype).
  LayerTensors layer(const Tensor& flat, int global_layer) const;
  OuterTensors outer(const Tensor& flat) const;
  Tensor view(const Tensor& flat, const std::string& name) const;

 private:
  ParamInfo& add(const std::string& name, Shape shape, bool decay, ParamInit init);
  void add_moe_mlp(const std::string& prefix);
  std::vector<std::pair<int64_t, int64_t>> fc1_pieces(int64_t F) const;
  void pad_to(int64_t multiple) { size_ = (size_ + multiple - 1) / multiple * multiple; }
  MoeMlpParams moe_views(const Tensor& flat, const std::string& prefix) const;
  // Splits the last-added parameter along `dim` into the given global pieces.
  void split(ParamInfo& p, int dim, std::vector<std::pair<int64_t, int64_t>> pieces);
  Tensor view_if(const Tensor& flat, const std::string& name) const;
  GptConfig config_;
  ChunkSpec spec_;
  TensorShard tp_;
  ExpertShard ep_;
  int64_t expert_run_multiple_ = 1;
  int num_layers_ = 0;
  std::vector<ParamInfo> params_;
  int64_t size_ = 0;
};

// Megatron's initialization into a host f32 buffer of layout.size() elements: weights
// N(0, std), output projections (linear_proj, linear_fc2) N(0, std / sqrt(2 * num_layers)),
// biases 0, norm weights 1. Each parameter draws from a generator seeded by (seed, name),
// so a parameter gets the same values whatever chunk or layout holds it.
void init_params(const ParamLayout& layout, uint64_t seed, const Tensor& host_f32);

// `shard`'s flat buffer cut out of a flat buffer of `whole` (the same model and chunk without
// tensor parallelism, e.g. weights imported from Hugging Face): host f32, shard.size()
// elements; rows of the shard's wider vocabulary padding are zero.
Tensor shard_params(const ParamLayout& whole, const Tensor& whole_f32, const ParamLayout& shard);

}  // namespace troupe
