#include "model/param_layout.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "kernels/check.hpp"

namespace troupe {

namespace {
constexpr int64_t kParamAlignment = 64;  // elements; Megatron's distributed-optimizer padding
std::string layer_prefix(int l) { return "decoder.layers." + std::to_string(l) + "."; }
}  // namespace

ParamLayout::ParamLayout(const GptConfig& config, const ChunkSpec& spec) : config_(config), spec_(spec) {
  config_.validate();
  TROUPE_CHECK(spec.first_layer >= 0 && spec.first_layer <= config.num_layers, "chunk first layer ", spec.first_layer,
               " is outside the model's ", config.num_layers, " layers");
  num_layers_ = spec.num_layers < 0 ? config.num_layers - spec.first_layer : spec.num_layers;
  TROUPE_CHECK(spec.first_layer + num_layers_ <= config.num_layers, "chunk layers [", spec.first_layer, ", ",
               spec.first_layer + num_layers_, ") exceed the model's ", config.num_layers, " layers");

  const GptConfig& c = config_;
  const int64_t C = c.hidden_size, Vp = c.padded_vocab_size();
  const bool ln = c.normalization == Normalization::layernorm;
  const bool bias = c.has_bias();
  auto norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {C}, false, ParamInit::ones);
    if (ln) add(prefix + ".bias", {C}, false, ParamInit::zeros);
  };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, ParamInit init) {
    add(prefix + ".weight", {out, in}, true, init);
    if (bias) add(prefix + ".bias", {out}, false, ParamInit::zeros);
  };

  // Reverse forward order: what backward finishes first comes first.
  if (spec.post_process) {
    if (c.untie_embeddings_and_output_weights) add("output_layer.weight", {Vp, C}, true, ParamInit::normal);
    norm("decoder.final_layernorm");
  }
  for (int l = spec.first_layer + num_layers_ - 1; l >= spec.first_layer; --l) {
    const std::string p = layer_prefix(l);
    linear(p + "mlp.linear_fc2", C, c.ffn(), ParamInit::scaled_normal);
    linear(p + "mlp.linear_fc1", c.swiglu ? 2 * int64_t(c.ffn()) : c.ffn(), C, ParamInit::normal);
    norm(p + "pre_mlp_layernorm");
    linear(p + "self_attention.linear_proj", C, int64_t(c.num_attention_heads) * c.head_dim(), ParamInit::scaled_normal);
    linear(p + "self_attention.linear_qkv", c.qkv_size(), C, ParamInit::normal);
    norm(p + "input_layernorm");
  }
  if (spec.pre_process) {
    if (c.position_embedding_type == PositionEmbedding::learned_absolute)
      add("embedding.position_embeddings.weight", {c.max_positions(), C}, true, ParamInit::normal);
    add("embedding.word_embeddings.weight", {Vp, C}, true, ParamInit::normal);
  }
  // A chunk holding the output layer but not the embedding still needs the tied weight.
  if (spec.post_process && !spec.pre_process && !c.untie_embeddings_and_output_weights)
    add("embedding.word_embeddings.weight", {Vp, C}, true, ParamInit::normal);
}

void ParamLayout::add(const std::string& name, Shape shape, bool decay, ParamInit init) {
  ParamInfo p{name, std::move(shape), size_, decay, init};
  size_ += (p.numel() + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  params_.push_back(std::move(p));
}

bool ParamLayout::has(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return true;
  return false;
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  TROUPE_FAIL("parameter '", name, "' is not in this model chunk");
}

std::vector<ParamSegment> ParamLayout::segments() const {
  std::vector<ParamSegment> s;
  s.reserve(params_.size());
  for (const auto& p : params_) s.push_back({p.offset, p.numel(), p.decay});
  return s;
}

Tensor ParamLayout::view(const Tensor& flat, const std::string& name) const {
  TROUPE_CHECK(flat.numel() == size_, "parameter buffer has ", flat.numel(), " elements, the layout needs ", size_);
  const ParamInfo& p = find(name);
  return flat.slice(p.offset, p.shape);
}

Tensor ParamLayout::view_if(const Tensor& flat, const std::string& name) const {
  return has(name) ? view(flat, name) : Tensor();
}

LayerTensors ParamLayout::layer(const Tensor& flat, int l) const {
  TROUPE_CHECK(l >= spec_.first_layer && l < spec_.first_layer + num_layers_, "layer ", l, " is not in this chunk");
  const std::string p = layer_prefix(l);
  LayerTensors t;
  t.ln1_w = view(flat, p + "input_layernorm.weight");
  t.ln1_b = view_if(flat, p + "input_layernorm.bias");
  t.qkv_w = view(flat, p + "self_attention.linear_qkv.weight");
  t.qkv_b = view_if(flat, p + "self_attention.linear_qkv.bias");
  t.proj_w = view(flat, p + "self_attention.linear_proj.weight");
  t.proj_b = view_if(flat, p + "self_attention.linear_proj.bias");
  t.ln2_w = view(flat, p + "pre_mlp_layernorm.weight");
  t.ln2_b = view_if(flat, p + "pre_mlp_layernorm.bias");
  t.fc1_w = view(flat, p + "mlp.linear_fc1.weight");
  t.fc1_b = view_if(flat, p + "mlp.linear_fc1.bias");
  t.fc2_w = view(flat, p + "mlp.linear_fc2.weight");
  t.fc2_b = view_if(flat, p + "mlp.linear_fc2.bias");
  return t;
}

OuterTensors ParamLayout::outer(const Tensor& flat) const {
  OuterTensors t;
  t.wte = view_if(flat, "embedding.word_embeddings.weight");
  t.wpe = view_if(flat, "embedding.position_embeddings.weight");
  t.lnf_w = view_if(flat, "decoder.final_layernorm.weight");
  t.lnf_b = view_if(flat, "decoder.final_layernorm.bias");
  t.output = has("output_layer.weight") ? view(flat, "output_layer.weight") : t.wte;
  return t;
}

void init_params(const ParamLayout& layout, uint64_t seed, const Tensor& host) {
  TROUPE_CHECK(host.device() == DeviceKind::cpu && host.dtype() == DType::f32 && host.numel() == layout.size(),
               "init_params needs a host f32 buffer of ", layout.size(), " elements, got ", host.str());
  std::memset(host.data(), 0, host.nbytes());
  const GptConfig& c = layout.config();
  const float scaled_std = c.init_method_std / std::sqrt(2.0f * float(c.num_layers));
  for (const auto& p : layout.params()) {
    float* dst = host.data_as<float>() + p.offset;
    switch (p.init) {
      case ParamInit::zeros: break;
      case ParamInit::ones: std::fill(dst, dst + p.numel(), 1.0f); break;
      case ParamInit::normal:
      case ParamInit::scaled_normal: {
        std::mt19937_64 rng(seed ^ (std::hash<std::string>{}(p.name) * 0x9e3779b97f4a7c15ull));
        std::normal_distribution<float> d(0.0f, p.init == ParamInit::normal ? c.init_method_std : scaled_std);
        for (int64_t i = 0; i < p.numel(); ++i) dst[i] = d(rng);
        break;
      }
    }
  }
}

}  // namespace troupe
