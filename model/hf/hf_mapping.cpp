#include "model/hf/hf_mapping.hpp"

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "model/hf/hf_moe_mapping.hpp"

namespace troupe {

HfArch hf_arch_for(const GptConfig& config) {
  if (config.normalization != Normalization::rmsnorm) return HfArch::gpt2;
  return config.moe.enabled() ? hf_moe_arch_for(config) : HfArch::llama;
}

const char* hf_arch_name(HfArch arch) {
  switch (arch) {
    case HfArch::gpt2:
      return "GPT-2";
    case HfArch::llama:
      return "Llama";
    case HfArch::mixtral:
      return "Mixtral";
    case HfArch::qwen_moe:
      return "Qwen-MoE";
  }
  return "?";
}

nlohmann::json hf_config_from_gpt(const GptConfig& c, HfArch arch) {
  TROUPE_CHECK(!c.moe.enabled() || arch == HfArch::mixtral || arch == HfArch::qwen_moe,
               "a model with experts (--num-experts) exports as Mixtral or Qwen-MoE, not ", hf_arch_name(arch));
  TROUPE_CHECK(c.moe.enabled() || arch == HfArch::gpt2 || arch == HfArch::llama, "a model without experts exports as ",
               "GPT-2 or Llama, not ", hf_arch_name(arch));
  if (arch == HfArch::gpt2)
    return {{"model_type", "gpt2"},
            {"architectures", {"GPT2LMHeadModel"}},
            {"n_layer", c.num_layers},
            {"n_embd", c.hidden_size},
            {"n_head", c.num_attention_heads},
            {"n_inner", c.ffn()},
            {"n_positions", c.max_positions()},
            {"vocab_size", c.vocab_size},
            {"layer_norm_epsilon", c.norm_epsilon},
            {"activation_function", "gelu_new"},
            {"tie_word_embeddings", !c.untie_embeddings_and_output_weights}};
  nlohmann::json j = {{"model_type", "llama"},
                      {"architectures", {"LlamaForCausalLM"}},
                      {"num_hidden_layers", c.num_layers},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.ffn()},
                      {"num_attention_heads", c.num_attention_heads},
                      {"num_key_value_heads", c.query_groups()},
                      {"head_dim", c.head_dim()},
                      {"max_position_embeddings", c.max_positions()},
                      {"vocab_size", c.vocab_size},
                      {"rms_norm_eps", c.norm_epsilon},
                      {"rope_theta", c.rotary_base},
                      {"tie_word_embeddings", !c.untie_embeddings_and_output_weights},
                      {"hidden_act", "silu"}};
  if (c.moe.enabled()) {  // Mixtral, Qwen2-MoE or Qwen3-MoE
    hf_moe_config_from_gpt(c, arch, j);
  } else if (c.qk_layernorm) {  // Llama with an RMSNorm on each query and key head is Qwen3
    // Qwen3's attention_bias puts a bias on o_proj too: only the bias-free form exists there.
    TROUPE_CHECK(!c.add_qkv_bias,
                 "no Hugging Face family has --qk-layernorm with --add-qkv-bias (Qwen3's "
                 "attention_bias also puts a bias on o_proj): such a model cannot be exported");
    j["model_type"] = "qwen3";
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["attention_bias"] = false;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.num_layers;
  } else if (c.add_qkv_bias) {  // Llama with a bias on q, k and v is Qwen2
    j["model_type"] = "qwen2";
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["use_sliding_window"] = false;
  } else if (c.sliding_window > 0) {  // Llama with a sliding window is Mistral
    j["model_type"] = "mistral";
    j["architectures"] = {"MistralForCausalLM"};
  }
  if (c.sliding_window > 0 && !c.moe.enabled()) {  // an MoE family's window: hf_moe_config_from_gpt
    j["sliding_window"] = c.sliding_window;
    if (j["model_type"] != "mistral") {  // Qwen's: on every layer
      j["use_sliding_window"] = true;
      j["max_window_layers"] = 0;
    }
  }
  j["rope_scaling"] = nullptr;
  if (c.rope_scaling.llama3)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         // an integer, as transformers requires (it warns about 8192.0)
                         {"original_max_position_embeddings", int64_t(c.rope_scaling.original_max_positions)}};
  return j;
}

namespace {

// "decoder.layers.7.mlp.linear_fc1.weight" -> layer 7, rest "mlp.linear_fc1.weight".
bool split_layer_name(const std::string& name, int& layer, std::string& rest) {
  const std::string prefix = "decoder.layers.";
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  layer = std::stoi(name.substr(prefix.size(), dot - prefix.size()));
  rest = name.substr(dot + 1);
  return true;
}

std::vector<HfPiece> gpt2_pieces(const GptConfig& c, const std::string& name, const std::string& p) {
  const int64_t C = c.hidden_size, V = c.vocab_size, F = c.ffn();
  int l = 0;
  std::string rest;
  if (name == kWordEmbeddingName) return {{p + "wte.weight", {V, C}}};
  if (name == "embedding.position_embeddings.weight") return {{p + "wpe.weight", {c.max_positions(), C}}};
  if (name == "decoder.final_layernorm.weight") return {{p + "ln_f.weight", {C}}};
  if (name == "decoder.final_layernorm.bias") return {{p + "ln_f.bias", {C}}};
  if (name == kOutputLayerName) return {{"lm_head.weight", {V, C}}};
  TROUPE_CHECK(split_layer_name(name, l, rest), "no GPT-2 name for parameter '", name, "'");
  const std::string h = p + "h." + std::to_string(l) + ".";
  if (rest == "input_layernorm.weight") return {{h + "ln_1.weight", {C}}};
  if (rest == "input_layernorm.bias") return {{h + "ln_1.bias", {C}}};
  if (rest == "self_attention.linear_qkv.weight") return {{h + "attn.c_attn.weight", {C, 3 * C}, true}};
  if (rest == "self_attention.linear_qkv.bias") return {{h + "attn.c_attn.bias", {3 * C}}};
  if (rest == "self_attention.linear_proj.weight") return {{h + "attn.c_proj.weight", {C, C}, true}};
  if (rest == "self_attention.linear_proj.bias") return {{h + "attn.c_proj.bias", {C}}};
  if (rest == "pre_mlp_layernorm.weight") return {{h + "ln_2.weight", {C}}};
  if (rest == "pre_mlp_layernorm.bias") return {{h + "ln_2.bias", {C}}};
  if (rest == "mlp.linear_fc1.weight") return {{h + "mlp.c_fc.weight", {C, F}, true}};
  if (rest == "mlp.linear_fc1.bias") return {{h + "mlp.c_fc.bias", {F}}};
  if (rest == "mlp.linear_fc2.weight") return {{h + "mlp.c_proj.weight", {F, C}, true}};
  if (rest == "mlp.linear_fc2.bias") return {{h + "mlp.c_proj.bias", {C}}};
  TROUPE_FAIL("no GPT-2 name for parameter '", name, "'");
}

std::vector<HfPiece> llama_pieces(const GptConfig& c, HfArch arch, const std::string& name, HfExpertLayout experts) {
  const int64_t C = c.hidden_size, V = c.vocab_size, F = c.ffn(), D = c.head_dim();
  const int64_t H = c.num_attention_heads, G = c.query_groups();
  int l = 0;
  std::string rest;
  if (name == kWordEmbeddingName) return {{"model.embed_tokens.weight", {V, C}}};
  if (name == "decoder.final_layernorm.weight") return {{"model.norm.weight", {C}}};
  if (name == kOutputLayerName) return {{"lm_head.weight", {V, C}}};
  TROUPE_CHECK(split_layer_name(name, l, rest), "no Llama name for parameter '", name, "'");
  const std::string h = "model.layers." + std::to_string(l) + ".";
  if (rest == "input_layernorm.weight") return {{h + "input_layernorm.weight", {C}}};
  if (rest == "pre_mlp_layernorm.weight") return {{h + "post_attention_layernorm.weight", {C}}};
  if (rest == "self_attention.linear_qkv.weight")
    return {{h + "self_attn.q_proj.weight", {H * D, C}, false, 0},
            {h + "self_attn.k_proj.weight", {G * D, C}, false, H * D},
            {h + "self_attn.v_proj.weight", {G * D, C}, false, (H + G) * D}};
  if (rest == "self_attention.linear_qkv.bias")  // Qwen2
    return {{h + "self_attn.q_proj.bias", {H * D}, false, 0},
            {h + "self_attn.k_proj.bias", {G * D}, false, H * D},
            {h + "self_attn.v_proj.bias", {G * D}, false, (H + G) * D}};
  if (rest == "self_attention.q_layernorm.weight") return {{h + "self_attn.q_norm.weight", {D}}};  // Qwen3
  if (rest == "self_attention.k_layernorm.weight") return {{h + "self_attn.k_norm.weight", {D}}};
  if (rest == "self_attention.linear_proj.weight") return {{h + "self_attn.o_proj.weight", {C, H * D}}};
  if (c.is_moe_layer(l) && rest.rfind("mlp.", 0) == 0) return hf_moe_pieces(c, arch, l, rest, experts);
  if (rest == "mlp.linear_fc1.weight")
    return {{h + "mlp.gate_proj.weight", {F, C}, false, 0}, {h + "mlp.up_proj.weight", {F, C}, false, F}};
  if (rest == "mlp.linear_fc2.weight") return {{h + "mlp.down_proj.weight", {C, F}}};
  TROUPE_FAIL("no Llama name for parameter '", name, "'");
}

// Our parameter seen as [rows, cols] (1-D parameters are [n, 1]).
void as_matrix(const Shape& s, int64_t& rows, int64_t& cols) {
  rows = s[0];
  cols = s.size() > 1 ? s[1] : 1;
}

}  // namespace

std::vector<HfPiece> hf_pieces(const GptConfig& c, HfArch arch, const std::string& name, const std::string& prefix,
                               HfExpertLayout experts) {
  return arch == HfArch::gpt2 ? gpt2_pieces(c, name, prefix) : llama_pieces(c, arch, name, experts);
}

void import_hf(const ParamLayout& layout, HfArch arch, const HfTensorGetter& get, const Tensor& host,
               const std::string& prefix, HfExpertLayout experts) {
  TROUPE_CHECK(!host.is_cuda() && host.dtype() == DType::f32 && host.numel() == layout.size(),
               "import_hf needs a host f32 buffer of ", layout.size(), " elements, got ", host.str());
  std::memset(host.data(), 0, host.nbytes());
  for (const ParamInfo& p : layout.params()) {
    int64_t rows = 0, cols = 0;
    as_matrix(p.shape, rows, cols);
    float* dst = host.data_as<float>() + p.offset;
    for (const HfPiece& piece : hf_pieces(layout.config(), arch, p.name, prefix, experts)) {
      const Tensor src = get(piece.hf_name, piece.hf_shape);
      // A fused piece: slice hf_index of the stacked tensor.
      const Shape shape = piece.hf_index < 0 ? piece.hf_shape : Shape(piece.hf_shape.begin() + 1, piece.hf_shape.end());
      const float* s = src.data_as<float>() + (piece.hf_index < 0 ? 0 : piece.hf_index * shape_numel(shape));
      const int64_t r0 = shape[0], c0 = shape.size() > 1 ? shape[1] : 1;
      const int64_t piece_rows = piece.transpose ? c0 : r0;
      TROUPE_CHECK(piece.row_offset + piece_rows <= rows, "HF tensor ", piece.hf_name, " has more rows than ", p.name);
      for (int64_t i = 0; i < piece_rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          dst[(piece.row_offset + i) * cols + j] = piece.transpose ? s[j * c0 + i] : s[i * cols + j];
    }
  }
}

Tensor export_hf_piece(const ParamInfo& p, const HfPiece& piece, const Tensor& host) {
  TROUPE_CHECK(piece.hf_index < 0, "export writes one HF tensor per expert, not the fused ", piece.hf_name);
  int64_t rows = 0, cols = 0;
  as_matrix(p.shape, rows, cols);
  const float* src = host.data_as<float>() + p.offset;
  Tensor t = Tensor::host(DType::f32, piece.hf_shape);
  float* d = t.data_as<float>();
  const int64_t r0 = piece.hf_shape[0], c0 = piece.hf_shape.size() > 1 ? piece.hf_shape[1] : 1;
  const int64_t piece_rows = piece.transpose ? c0 : r0;
  TROUPE_CHECK(piece.row_offset + piece_rows <= rows, "HF tensor ", piece.hf_name, " has more rows than ", p.name);
  for (int64_t i = 0; i < piece_rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      (piece.transpose ? d[j * c0 + i] : d[i * cols + j]) = src[(piece.row_offset + i) * cols + j];
  return t;
}

std::vector<std::pair<std::string, Tensor>> export_hf(const ParamLayout& layout, HfArch arch, const Tensor& host,
                                                      const std::string& prefix) {
  TROUPE_CHECK(!host.is_cuda() && host.dtype() == DType::f32 && host.numel() == layout.size(),
               "export_hf needs a host f32 buffer of ", layout.size(), " elements, got ", host.str());
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ParamInfo& p : layout.params())
    for (const HfPiece& piece : hf_pieces(layout.config(), arch, p.name, prefix))
      out.emplace_back(piece.hf_name, export_hf_piece(p, piece, host));
  return out;
}

}  // namespace troupe
