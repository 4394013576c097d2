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
#pragma once

#include <string>
#include <vector>

#include "kernels/adamw.hpp"
#include "kernels/tensor.hpp"
#include "model/config.hpp"

namespace troupe {

// Which part of the model a chunk holds (Megatron's pre_process / post_process).
struct ChunkSpec {
  int first_layer = 0;
  int num_layers = -1;        // -1: all layers from first_layer on
  bool pre_process = true;    // holds the embedding
  bool post_process = true;   // holds the final norm, output layer and loss
  static ChunkSpec whole_model() { return {}; }
};

enum class ParamInit { normal, scaled_normal, zeros, ones };

struct ParamInfo {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // elements into the flat buffer
  bool decay = true;   // weight decay applies (not to biases and norm weights)
  ParamInit init = ParamInit::normal;
  int64_t numel() const { return shape_numel(shape); }
};

// Views of one transformer layer's parameters (or gradients) in a flat buffer.
// Tensors that the config does not have (biases, LayerNorm bias) are undefined.
struct LayerTensors {
  Tensor ln1_w, ln1_b;    // [C]
  Tensor qkv_w, qkv_b;    // [(H+2G)*D, C], [(H+2G)*D]
  Tensor proj_w, proj_b;  // [C, H*D], [C]
  Tensor ln2_w, ln2_b;    // [C]
  Tensor fc1_w, fc1_b;    // [F or 2F (swiglu: [gate; up]), C]
  Tensor fc2_w, fc2_b;    // [C, F], [C]
};

// Views of the embedding and head parameters (undefined where the chunk lacks them).
struct OuterTensors {
  Tensor wte;       // [Vp, C] embedding.word_embeddings.weight
  Tensor wpe;       // [P, C]  embedding.position_embeddings.weight (learned_absolute)
  Tensor lnf_w, lnf_b;  // [C] decoder.final_layernorm
  Tensor output;    // [Vp, C] output_layer.weight, or the tied wte
};

class ParamLayout {
 public:
  ParamLayout(const GptConfig& config, const ChunkSpec& spec);

  const GptConfig& config() const { return config_; }
  const ChunkSpec& spec() const { return spec_; }
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
  void add(const std::string& name, Shape shape, bool decay, ParamInit init);
  Tensor view_if(const Tensor& flat, const std::string& name) const;
  GptConfig config_;
  ChunkSpec spec_;
  int num_layers_ = 0;
  std::vector<ParamInfo> params_;
  int64_t size_ = 0;
};

// Megatron's initialization into a host f32 buffer of layout.size() elements: weights
// N(0, std), output projections (linear_proj, linear_fc2) N(0, std / sqrt(2 * num_layers)),
// biases 0, norm weights 1. Each parameter draws from a generator seeded by (seed, name),
// so a parameter gets the same values whatever chunk or layout holds it.
void init_params(const ParamLayout& layout, uint64_t seed, const Tensor& host_f32);

}  // namespace troupe
