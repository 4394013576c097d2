#include "model/param_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "base/check.hpp"

namespace troupe {

namespace {
constexpr int64_t kParamAlignment = 64;  // elements; Megatron's distributed-optimizer padding
std::string layer_prefix(int l) { return "decoder.layers." + std::to_string(l) + "."; }
}  // namespace

ParamLayout::ParamLayout(const GptConfig& config, const ChunkSpec& spec, TensorShard tp, ExpertShard ep,
                         int64_t expert_run_multiple)
    : config_(config), spec_(spec), tp_(tp), ep_(ep), expert_run_multiple_(expert_run_multiple) {
  config_.validate();
  TROUPE_CHECK(expert_run_multiple == 1 || (expert_run_multiple > 0 && expert_run_multiple % kParamAlignment == 0),
               "ParamLayout: the experts' run multiple ", expert_run_multiple, " is not 1 or a multiple of ",
               kParamAlignment);
  TROUPE_CHECK(spec.first_layer >= 0 && spec.first_layer <= config.num_layers, "chunk first layer ", spec.first_layer,
               " is outside the model's ", config.num_layers, " layers");
  num_layers_ = spec.num_layers < 0 ? config.num_layers - spec.first_layer : spec.num_layers;
  TROUPE_CHECK(spec.first_layer + num_layers_ <= config.num_layers, "chunk layers [", spec.first_layer, ", ",
               spec.first_layer + num_layers_, ") exceed the model's ", config.num_layers, " layers");
  const GptConfig& c = config_;
  const int T = tp.size;
  c.validate_tensor_parallel(T);
  TROUPE_CHECK(tp.rank >= 0 && tp.rank < T, "tensor-parallel rank ", tp.rank, " of ", T);
  TROUPE_CHECK(ep.size >= 1 && ep.rank >= 0 && ep.rank < ep.size, "expert-parallel rank ", ep.rank, " of ", ep.size);
  TROUPE_CHECK(ep.size == 1 || (c.moe.num_experts > 0 && c.moe.num_experts % ep.size == 0), "--num-experts ",
               c.moe.num_experts, " does not split over --expert-model-parallel-size ", ep.size,
               "; pick a size that divides it");

  const int64_t C = c.hidden_size, Vp = padded_vocab(), D = c.head_dim(), H = c.num_attention_heads,
                G = c.query_groups(), F = c.ffn(), r = tp.rank;
  const int64_t Hl = H / T, Gl = G / T, Vl = Vp / T;
  const bool ln = c.normalization == Normalization::layernorm;
  const bool bias = c.has_bias();
  auto norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {C}, false, ParamInit::ones).norm = true;
    if (ln) add(prefix + ".bias", {C}, false, ParamInit::zeros).norm = true;
  };
  // Column-parallel: rows split into `pieces`; the bias split the same way.
  auto column = [&](const std::string& prefix, int64_t out, std::vector<std::pair<int64_t, int64_t>> pieces,
                    bool with_bias) {
    split(add(prefix + ".weight", {out, C}, true, ParamInit::normal), 0, pieces);
    if (with_bias) split(add(prefix + ".bias", {out}, false, ParamInit::zeros), 0, pieces);
  };
  // Row-parallel: columns split (one contiguous piece); the bias is replicated.
  auto row = [&](const std::string& prefix, int64_t in) {
    split(add(prefix + ".weight", {C, in}, true, ParamInit::scaled_normal), 1, {{r * in / T, in / T}});
    if (bias) add(prefix + ".bias", {C}, false, ParamInit::zeros);
  };
  auto vocab = [&](const std::string& name) { split(add(name, {Vp, C}, true, ParamInit::normal), 0, {{r * Vl, Vl}}); };

  // Reverse forward order: what backward finishes first comes first.
  if (spec.post_process) {
    if (c.untie_embeddings_and_output_weights) vocab(kOutputLayerName);
    norm("decoder.final_layernorm");
  }
  for (int l = spec.first_layer + num_layers_ - 1; l >= spec.first_layer; --l) {
    const std::string p = layer_prefix(l);
    if (c.is_moe_layer(l)) {
      add_moe_mlp(p + "mlp.");
    } else {
      row(p + "mlp.linear_fc2", F);
      column(p + "mlp.linear_fc1", c.swiglu ? 2 * F : F, fc1_pieces(F), bias);
    }
    norm(p + "pre_mlp_layernorm");
    row(p + "self_attention.linear_proj", H * D);
    if (c.qk_layernorm) {  // one weight over every head: each rank normalizes its own heads with it
      add(p + "self_attention.k_layernorm.weight", {D}, false, ParamInit::ones).partial_grad = true;
      add(p + "self_attention.q_layernorm.weight", {D}, false, ParamInit::ones).partial_grad = true;
    }
    // [Q of H heads; K of G groups; V of G groups]: each rank takes its heads and groups.
    column(p + "self_attention.linear_qkv", c.qkv_size(),
           {{r * Hl * D, Hl * D}, {H * D + r * Gl * D, Gl * D}, {(H + G) * D + r * Gl * D, Gl * D}}, c.has_qkv_bias());
    norm(p + "input_layernorm");
  }
  if (spec.pre_process) {
    if (c.position_embedding_type == PositionEmbedding::learned_absolute)
      add("embedding.position_embeddings.weight", {c.max_positions(), C}, true, ParamInit::normal);
    vocab(kWordEmbeddingName);
  }
  // A chunk holding the output layer but not the embedding still needs the tied weight.
  if (spec.post_process && !spec.pre_process && !c.untie_embeddings_and_output_weights) vocab(kWordEmbeddingName);
}

// The rows of an MLP's fc1 (width F; [gate; up] with SwiGLU) this tensor-parallel rank holds:
// its part of each half.
std::vector<std::pair<int64_t, int64_t>> ParamLayout::fc1_pieces(int64_t F) const {
  const int64_t Fl = F / tp_.size, r = tp_.rank;
  if (config_.swiglu) return {{r * Fl, Fl}, {F + r * Fl, Fl}};
  return {{r * Fl, Fl}};
}

// An MoE MLP (model/moe/moe_mlp.hpp; no biases): each routed expert by its own global name, so
// a checkpoint stores experts as separate tensors. Under tensor parallelism every expert (and
// the shared expert) is split as the dense MLP: fc1 by rows, fc2 by columns; the router and the
// shared gate are replicated. Expert e's weight follows expert e - 1's with no gap
// (validate_tensor_parallel checks that F / TP * C is a multiple of the 64-element alignment):
// all local experts' fc1 (and fc2) form one [E, F1, C] tensor for the grouped GEMM. Init as
// Megatron's: fc1 and the router N(0, std), fc2 the scaled std.
void ParamLayout::add_moe_mlp(const std::string& prefix) {
  const GptConfig& c = config_;
  const MoeConfig& m = c.moe;
  const int64_t C = c.hidden_size, F = m.expert_ffn(c.ffn()), F1 = c.swiglu ? 2 * F : F, T = tp_.size, r = tp_.rank;
  // fc2 [C, width] by columns, then fc1 [width or 2 width, C] by rows.
  auto mlp = [&](const std::string& fc2, const std::string& fc1, int64_t width) {
    split(add(fc2, {C, width}, true, ParamInit::scaled_normal), 1, {{r * width / T, width / T}});
    split(add(fc1, {c.swiglu ? 2 * width : width, C}, true, ParamInit::normal), 0, fc1_pieces(width));
  };
  if (m.has_shared_expert()) {
    mlp(prefix + "shared_experts.linear_fc2.weight", prefix + "shared_experts.linear_fc1.weight",
        m.moe_shared_expert_intermediate_size);
    if (m.moe_shared_expert_gate)
      add(prefix + "shared_experts.gate_weight", {1, C}, true, ParamInit::normal).partial_grad = true;
  }
  const int e0 = first_local_expert(), e1 = e0 + local_experts();
  pad_to(expert_run_multiple_);  // the run of routed experts starts and ends on the multiple
  for (int e = e0; e < e1; ++e)
    split(add(moe_expert_name(prefix, e, "linear_fc2"), {C, F}, true, ParamInit::scaled_normal), 1,
          {{r * F / T, F / T}});
  for (int e = e0; e < e1; ++e)
    split(add(moe_expert_name(prefix, e, "linear_fc1"), {F1, C}, true, ParamInit::normal), 0, fc1_pieces(F));
  pad_to(expert_run_multiple_);
  add(prefix + "router.weight", {int64_t(m.num_experts), C}, true, ParamInit::normal);
}

bool ParamLayout::is_expert_param(const std::string& name) { return name.find(".mlp.experts.") != std::string::npos; }

std::vector<std::pair<int64_t, int64_t>> ParamLayout::expert_runs() const {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!is_expert_param(params_[i].name)) continue;
    const int64_t begin = params_[i].offset, end = i + 1 < params_.size() ? params_[i + 1].offset : size_;
    if (!runs.empty() && runs.back().second == begin)
      runs.back().second = end;
    else
      runs.emplace_back(begin, end);
  }
  return runs;
}

std::string moe_expert_name(const std::string& mlp_prefix, int expert, const char* linear) {
  return mlp_prefix + "experts." + std::to_string(expert) + "." + linear + ".weight";
}

ParamInfo& ParamLayout::add(const std::string& name, Shape shape, bool decay, ParamInit init) {
  ParamInfo p;
  p.name = name;
  p.shape = shape;
  p.offset = size_;
  p.decay = decay;
  p.init = init;
  p.global_shape = std::move(shape);
  size_ += (p.numel() + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  params_.push_back(std::move(p));
  return params_.back();
}

void ParamLayout::split(ParamInfo& p, int dim, std::vector<std::pair<int64_t, int64_t>> pieces) {
  if (tp_.size == 1) return;  // the whole tensor: nothing to record
  TROUPE_CHECK(params_.back().name == p.name, "ParamLayout::split: only the last-added parameter");
  int64_t local = 0;
  for (const auto& [start, len] : pieces) local += len;
  size_ = p.offset;  // re-add with the shard's size
  p.shape[size_t(dim)] = local;
  p.split_dim = dim;
  p.pieces = std::move(pieces);
  size_ += (p.numel() + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
}

namespace {
// Visits the runs a shard shares with the global tensor: (global element, shard element, count).
template <typename F>
void for_each_run(const ParamInfo& p, int64_t global_rows, F&& f) {
  const int64_t rows = global_rows < 0 ? p.global_shape[0] : global_rows;
  if (p.replicated()) {
    const int64_t inner = p.global_numel() / p.global_shape[0];
    f(int64_t(0), int64_t(0), std::min(rows, p.global_shape[0]) * inner);
    return;
  }
  if (p.split_dim == 0) {
    const int64_t inner = p.global_numel() / p.global_shape[0];
    int64_t at = 0;
    for (const auto& [start, len] : p.pieces) {
      const int64_t n = std::clamp(rows - start, int64_t(0), len);
      if (n > 0) f(start * inner, at * inner, n * inner);
      at += len;
    }
    return;
  }
  TROUPE_CHECK(p.split_dim == 1 && p.global_shape.size() == 2, "parameter ", p.name, ": unsupported split");
  const int64_t cols = p.global_shape[1], local_cols = p.shape[1];
  for (int64_t i = 0; i < std::min(rows, p.global_shape[0]); ++i) {
    int64_t at = 0;
    for (const auto& [start, len] : p.pieces) {
      f(i * cols + start, i * local_cols + at, len);
      at += len;
    }
  }
}
}  // namespace

void shard_from_global(const ParamInfo& p, const float* global, float* shard, int64_t global_rows) {
  for_each_run(p, global_rows, [&](int64_t g, int64_t s, int64_t n) { std::copy_n(global + g, n, shard + s); });
}

void shard_to_global(const ParamInfo& p, const float* shard, float* global, int64_t global_rows) {
  for_each_run(p, global_rows, [&](int64_t g, int64_t s, int64_t n) { std::copy_n(shard + s, n, global + g); });
}

Tensor shard_params(const ParamLayout& whole, const Tensor& whole_f32, const ParamLayout& shard) {
  TROUPE_CHECK(whole.tensor_shard().size == 1, "shard_params: the source layout is itself a shard");
  TROUPE_CHECK(whole_f32.numel() == whole.size() && whole_f32.dtype() == DType::f32 && !whole_f32.is_cuda(),
               "shard_params: expected a host f32 buffer of ", whole.size(), " elements, got ", whole_f32.str());
  Tensor out = Tensor::host(DType::f32, {shard.size()});
  std::fill_n(out.data_as<float>(), shard.size(), 0.0f);
  for (const ParamInfo& p : shard.params()) {
    const ParamInfo& g = whole.find(p.name);
    shard_from_global(p, whole_f32.data_as<float>() + g.offset, out.data_as<float>() + p.offset, g.global_shape[0]);
  }
  return out;
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
  TROUPE_CHECK(flat.numel() >= size_, "parameter buffer has ", flat.numel(), " elements, the layout needs ", size_);
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
  t.q_norm = view_if(flat, p + "self_attention.q_layernorm.weight");
  t.k_norm = view_if(flat, p + "self_attention.k_layernorm.weight");
  t.proj_w = view(flat, p + "self_attention.linear_proj.weight");
  t.proj_b = view_if(flat, p + "self_attention.linear_proj.bias");
  t.ln2_w = view(flat, p + "pre_mlp_layernorm.weight");
  t.ln2_b = view_if(flat, p + "pre_mlp_layernorm.bias");
  if (config_.is_moe_layer(l)) {
    t.moe = moe_views(flat, p + "mlp.");
    return t;
  }
  t.fc1_w = view(flat, p + "mlp.linear_fc1.weight");
  t.fc1_b = view_if(flat, p + "mlp.linear_fc1.bias");
  t.fc2_w = view(flat, p + "mlp.linear_fc2.weight");
  t.fc2_b = view_if(flat, p + "mlp.linear_fc2.bias");
  return t;
}

// The local experts' weights as [E / EP, rows, cols] over their consecutive per-expert parameters.
MoeMlpParams ParamLayout::moe_views(const Tensor& flat, const std::string& prefix) const {
  const int E = local_experts(), e0 = first_local_expert();
  auto experts = [&](const char* linear) {
    const ParamInfo& first = find(moe_expert_name(prefix, e0, linear));
    for (int e = 1; e < E; ++e)
      TROUPE_CHECK(find(moe_expert_name(prefix, e0 + e, linear)).offset == first.offset + e * first.numel(),
                   "ParamLayout: expert ", e, "'s ", linear, " does not follow expert ", e - 1, "'s");
    return flat.slice(first.offset, {int64_t(E), first.shape[0], first.shape[1]});
  };
  MoeMlpParams m;
  m.router = view(flat, prefix + "router.weight");
  m.fc1 = experts("linear_fc1");
  m.fc2 = experts("linear_fc2");
  m.shared_fc1 = view_if(flat, prefix + "shared_experts.linear_fc1.weight");
  m.shared_fc2 = view_if(flat, prefix + "shared_experts.linear_fc2.weight");
  m.shared_gate = view_if(flat, prefix + "shared_experts.gate_weight");
  return m;
}

OuterTensors ParamLayout::outer(const Tensor& flat) const {
  OuterTensors t;
  t.wte = view_if(flat, kWordEmbeddingName);
  t.wpe = view_if(flat, "embedding.position_embeddings.weight");
  t.lnf_w = view_if(flat, "decoder.final_layernorm.weight");
  t.lnf_b = view_if(flat, "decoder.final_layernorm.bias");
  t.output = has(kOutputLayerName) ? view(flat, kOutputLayerName) : t.wte;
  return t;
}

void init_params(const ParamLayout& layout, uint64_t seed, const Tensor& host) {
  TROUPE_CHECK(host.device() == DeviceKind::cpu && host.dtype() == DType::f32 && host.numel() == layout.size(),
               "init_params needs a host f32 buffer of ", layout.size(), " elements, got ", host.str());
  std::memset(host.data(), 0, host.nbytes());
  const GptConfig& c = layout.config();
  const float scaled_std = c.init_method_std / std::sqrt(2.0f * float(c.num_layers));
  // Every parameter has its own generator, so they fill in parallel (a 1.3B model in seconds).
  const auto& params = layout.params();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    float* dst = host.data_as<float>() + p.offset;
    // A shard is cut from the global tensor, so every layout draws the same values.
    std::vector<float> global;
    float* out = dst;
    if (!p.replicated()) {
      global.assign(size_t(p.global_numel()), 0.0f);
      out = global.data();
    }
    const int64_t n = p.global_numel();
    switch (p.init) {
      case ParamInit::zeros:
        break;
      case ParamInit::ones:
        std::fill(out, out + n, 1.0f);
        break;
      case ParamInit::normal:
      case ParamInit::scaled_normal: {
        std::mt19937_64 rng(seed ^ (std::hash<std::string>{}(p.name) * 0x9e3779b97f4a7c15ull));
        std::normal_distribution<float> d(0.0f, p.init == ParamInit::normal ? c.init_method_std : scaled_std);
        for (int64_t k = 0; k < n; ++k) out[k] = d(rng);
        break;
      }
    }
    if (!p.replicated()) shard_from_global(p, global.data(), dst);
  }
}

}  // namespace troupe
