#include "model/config.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "model/config_moe.hpp"

namespace troupe {

int64_t GptConfig::padded_vocab_size(int tensor_parallel_size) const {
  const int64_t multiple = int64_t(make_vocab_size_divisible_by) * tensor_parallel_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

void GptConfig::validate_tensor_parallel(int tp) const {
  TROUPE_CHECK(tp >= 1, "--tensor-model-parallel-size must be >= 1, got ", tp);
  TROUPE_CHECK(num_attention_heads % tp == 0, "--num-attention-heads (", num_attention_heads,
               ") must be divisible by --tensor-model-parallel-size (", tp, ")");
  TROUPE_CHECK(query_groups() % tp == 0, "--num-query-groups (", query_groups(),
               ") must be divisible by --tensor-model-parallel-size (", tp, ")");
  TROUPE_CHECK(ffn() % tp == 0, "--ffn-hidden-size (", ffn(), ") must be divisible by --tensor-model-parallel-size (",
               tp, ")");
  if (!moe.enabled()) return;
  // Megatron's default expert-tensor-parallel layout: every expert split over the TP group like
  // the dense MLP; the local experts' weights must stay one aligned run (ParamLayout).
  const int64_t expert_ffn = moe.expert_ffn(ffn());
  TROUPE_CHECK(expert_ffn % tp == 0, "--moe-ffn-hidden-size (", expert_ffn,
               ") must be divisible by --tensor-model-parallel-size (", tp, ")");
  TROUPE_CHECK(expert_ffn / tp * hidden_size % 64 == 0, "--moe-ffn-hidden-size (", expert_ffn,
               ") / --tensor-model-parallel-size (", tp, ") x --hidden-size (", hidden_size,
               ") must be a multiple of 64 (each expert's shard is one aligned run)");
  TROUPE_CHECK(moe.moe_shared_expert_intermediate_size % tp == 0, "--moe-shared-expert-intermediate-size (",
               moe.moe_shared_expert_intermediate_size, ") must be divisible by --tensor-model-parallel-size (", tp,
               ")");
}

void GptConfig::validate() const {
  TROUPE_CHECK(num_layers > 0, "--num-layers must be positive, got ", num_layers);
  TROUPE_CHECK(hidden_size > 0, "--hidden-size must be positive, got ", hidden_size);
  TROUPE_CHECK(num_attention_heads > 0, "--num-attention-heads must be positive, got ", num_attention_heads);
  TROUPE_CHECK(kv_channels > 0 || hidden_size % num_attention_heads == 0, "--hidden-size ", hidden_size,
               " is not divisible by --num-attention-heads ", num_attention_heads, " (or set --kv-channels)");
  TROUPE_CHECK(num_query_groups >= 0 && num_attention_heads % query_groups() == 0, "--num-attention-heads ",
               num_attention_heads, " is not divisible by --num-query-groups ", query_groups());
  TROUPE_CHECK(head_dim() % 2 == 0 || position_embedding_type != PositionEmbedding::rope,
               "RoPE needs an even head dimension, got ", head_dim());
  TROUPE_CHECK(head_dim() % 8 == 0, "the head dimension (--kv-channels or hidden/heads) must be a multiple of 8, got ",
               head_dim());
  TROUPE_CHECK(hidden_size % 8 == 0, "--hidden-size must be a multiple of 8, got ", hidden_size);
  TROUPE_CHECK(ffn() % 8 == 0, "--ffn-hidden-size must be a multiple of 8, got ", ffn());
  TROUPE_CHECK(seq_length > 0, "--seq-length must be positive, got ", seq_length);
  TROUPE_CHECK(position_embedding_type != PositionEmbedding::learned_absolute || max_positions() >= seq_length,
               "--max-position-embeddings ", max_positions(), " is smaller than --seq-length ", seq_length);
  TROUPE_CHECK(vocab_size > 0, "--vocab-size must be positive, got ", vocab_size);
  TROUPE_CHECK(make_vocab_size_divisible_by > 0 && make_vocab_size_divisible_by % 8 == 0,
               "--make-vocab-size-divisible-by must be a positive multiple of 8, got ", make_vocab_size_divisible_by);
  TROUPE_CHECK(norm_epsilon > 0, "--norm-epsilon must be positive, got ", norm_epsilon);
  TROUPE_CHECK(hidden_dropout >= 0 && hidden_dropout < 1, "--hidden-dropout must be in [0, 1), got ", hidden_dropout);
  TROUPE_CHECK(attention_dropout == 0.0f, "--attention-dropout ", attention_dropout,
               ": dropout on attention probabilities is not implemented yet; pass --attention-dropout 0");
  TROUPE_CHECK(init_method_std > 0, "--init-method-std must be positive, got ", init_method_std);
  TROUPE_CHECK(sliding_window >= 0, "the sliding window must be >= 0 (0: none), got ", sliding_window);
  TROUPE_CHECK(!qk_layernorm || normalization == Normalization::rmsnorm,
               "--qk-layernorm with --normalization LayerNorm is not implemented (Qwen3's q/k norm is RMSNorm): pass "
               "--normalization RMSNorm");
  if (rope_scaling.llama3) {
    const RopeScaling& s = rope_scaling;
    TROUPE_CHECK(position_embedding_type == PositionEmbedding::rope,
                 "--use-rope-scaling needs --position-embedding-type rope");
    TROUPE_CHECK(s.factor >= 1, "--rope-scaling-factor must be >= 1, got ", s.factor);
    TROUPE_CHECK(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor,
                 "RoPE scaling needs 0 < low_freq_factor < high_freq_factor, got ", s.low_freq_factor, " and ",
                 s.high_freq_factor);
    TROUPE_CHECK(s.original_max_positions > 0 && std::floor(s.original_max_positions) == s.original_max_positions,
                 "RoPE scaling's original_max_position_embeddings must be a positive integer, got ",
                 s.original_max_positions);
  }
  validate_moe(*this);
}

int64_t GptConfig::num_parameters() const {
  const int64_t c = hidden_size, vp = padded_vocab_size();
  const int64_t bias = has_bias() ? 1 : 0;
  const int64_t norm = normalization == Normalization::layernorm ? 2 * c : c;
  const int64_t attn_out = int64_t(num_attention_heads) * head_dim();
  const int64_t fc1_rows = swiglu ? 2 * int64_t(ffn()) : ffn();
  int64_t layer = norm + qkv_size() * c + (has_qkv_bias() ? 1 : 0) * qkv_size() + c * attn_out + bias * c + norm +
                  fc1_rows * c + bias * fc1_rows + c * ffn() + bias * c;
  if (qk_layernorm) layer += 2 * int64_t(head_dim());
  const int64_t dense_mlp = fc1_rows * c + bias * fc1_rows + c * ffn() + bias * c;
  int64_t n = vp * c + int64_t(num_layers) * layer + norm;
  for (int l = 0; l < num_layers; ++l)
    if (is_moe_layer(l)) n += moe_mlp_parameters(*this) - dense_mlp;
  if (position_embedding_type == PositionEmbedding::learned_absolute) n += int64_t(max_positions()) * c;
  if (untie_embeddings_and_output_weights) n += vp * c;
  return n;
}

int64_t GptConfig::num_active_parameters() const {
  int64_t n = num_parameters();
  for (int l = 0; l < num_layers; ++l)
    if (is_moe_layer(l)) n -= moe_mlp_parameters(*this) - moe_mlp_active_parameters(*this);
  return n;
}

GptConfig GptConfig::gpt2_124m() {
  GptConfig c;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  return c;
}

GptConfig GptConfig::gpt2_350m() {
  GptConfig c = gpt2_124m();
  c.num_layers = 24;
  c.hidden_size = 1024;
  c.num_attention_heads = 16;
  return c;
}

GptConfig GptConfig::llama_style(int layers, int hidden, int heads, int groups, int ffn) {
  GptConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_query_groups = groups;
  c.ffn_hidden_size = ffn;
  c.normalization = Normalization::rmsnorm;
  c.position_embedding_type = PositionEmbedding::rope;
  c.swiglu = true;
  c.disable_bias_linear = true;
  c.untie_embeddings_and_output_weights = true;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  return c;
}

GptConfig GptConfig::preset(const std::string& name) {
  if (name == "gpt2-124m") return gpt2_124m();
  if (name == "gpt2-350m") return gpt2_350m();
  if (name == "gpt2-tiny") {  // trains on a CPU in minutes
    GptConfig c = gpt2_124m();
    c.num_layers = 4;
    c.hidden_size = 128;
    c.num_attention_heads = 4;
    c.seq_length = 128;
    return c;
  }
  if (name == "llama-tiny") {
    GptConfig c = llama_style(4, 128, 4, 2, 352);
    c.seq_length = 128;
    return c;
  }
  TROUPE_FAIL("unknown model preset '", name, "' (expected gpt2-124m, gpt2-350m, gpt2-tiny or llama-tiny)");
}

const char* normalization_name(Normalization n) { return n == Normalization::layernorm ? "LayerNorm" : "RMSNorm"; }

const char* position_embedding_name(PositionEmbedding p) {
  return p == PositionEmbedding::learned_absolute ? "learned_absolute" : "rope";
}

namespace {

nlohmann::json rope_scaling_json(const RopeScaling& s) {
  if (!s.llama3) return nullptr;
  return {{"type", "llama3"},
          {"factor", s.factor},
          {"low_freq_factor", s.low_freq_factor},
          {"high_freq_factor", s.high_freq_factor},
          {"original_max_position_embeddings", s.original_max_positions}};
}

RopeScaling rope_scaling_from_json(const nlohmann::json& j) {
  RopeScaling s;
  if (j.is_null()) return s;
  TROUPE_CHECK(j.is_object() && j.value("type", std::string()) == "llama3",
               "model config: rope_scaling must be null or a llama3 scaling, got ", j.dump());
  for (const auto& [key, value] : j.items())
    TROUPE_CHECK(key == "type" || key == "factor" || key == "low_freq_factor" || key == "high_freq_factor" ||
                     key == "original_max_position_embeddings",
                 "model config: rope_scaling has an unknown key '", key, "'");
  s.llama3 = true;
  s.factor = j.at("factor");
  s.low_freq_factor = j.at("low_freq_factor");
  s.high_freq_factor = j.at("high_freq_factor");
  s.original_max_positions = j.at("original_max_position_embeddings");
  return s;
}

}  // namespace

nlohmann::json to_json(const GptConfig& c) {
  nlohmann::json j = {{"num_layers", c.num_layers},
                      {"hidden_size", c.hidden_size},
                      {"ffn_hidden_size", c.ffn()},
                      {"num_attention_heads", c.num_attention_heads},
                      {"num_query_groups", c.query_groups()},
                      {"kv_channels", c.head_dim()},
                      {"seq_length", c.seq_length},
                      {"max_position_embeddings", c.max_positions()},
                      {"vocab_size", c.vocab_size},
                      {"make_vocab_size_divisible_by", c.make_vocab_size_divisible_by},
                      {"normalization", normalization_name(c.normalization)},
                      {"norm_epsilon", c.norm_epsilon},
                      {"position_embedding_type", position_embedding_name(c.position_embedding_type)},
                      {"rotary_base", c.rotary_base},
                      {"rope_scaling", rope_scaling_json(c.rope_scaling)},
                      {"swiglu", c.swiglu},
                      {"disable_bias_linear", c.disable_bias_linear},
                      {"add_qkv_bias", c.add_qkv_bias},
                      {"qk_layernorm", c.qk_layernorm},
                      {"sliding_window", c.sliding_window},
                      {"untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights},
                      {"hidden_dropout", c.hidden_dropout},
                      {"attention_dropout", c.attention_dropout},
                      {"init_method_std", c.init_method_std}};
  if (c.moe.enabled()) j["moe"] = moe_config_to_json(c.moe);  // a dense model's config stays as it was
  return j;
}

GptConfig gpt_config_from_json(const nlohmann::json& j) {
  GptConfig c;
  // A key this version does not know could change the model: refuse it rather than guess.
  const nlohmann::json known = to_json(c);
  for (const auto& [key, value] : j.items())
    TROUPE_CHECK(known.contains(key) || key == "moe", "model config: unknown key '", key, "' (", value.dump(),
                 "): written by a newer Troupe? This version cannot build that model");
  auto get = [&](const char* key, auto& field) {
    if (j.contains(key)) j.at(key).get_to(field);
  };
  try {
    get("num_layers", c.num_layers);
    get("hidden_size", c.hidden_size);
    get("ffn_hidden_size", c.ffn_hidden_size);
    get("num_attention_heads", c.num_attention_heads);
    get("num_query_groups", c.num_query_groups);
    get("kv_channels", c.kv_channels);
    get("seq_length", c.seq_length);
    get("max_position_embeddings", c.max_position_embeddings);
    get("vocab_size", c.vocab_size);
    get("make_vocab_size_divisible_by", c.make_vocab_size_divisible_by);
    get("norm_epsilon", c.norm_epsilon);
    get("rotary_base", c.rotary_base);
    if (j.contains("rope_scaling")) c.rope_scaling = rope_scaling_from_json(j.at("rope_scaling"));
    get("swiglu", c.swiglu);
    get("disable_bias_linear", c.disable_bias_linear);
    get("add_qkv_bias", c.add_qkv_bias);
    get("qk_layernorm", c.qk_layernorm);
    get("sliding_window", c.sliding_window);
    get("untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights);
    get("hidden_dropout", c.hidden_dropout);
    get("attention_dropout", c.attention_dropout);
    get("init_method_std", c.init_method_std);
    if (j.contains("moe")) c.moe = moe_config_from_json(j.at("moe"));
    if (j.contains("normalization")) {
      const std::string n = j.at("normalization");
      TROUPE_CHECK(n == "LayerNorm" || n == "RMSNorm", "normalization must be LayerNorm or RMSNorm, got ", n);
      c.normalization = n == "LayerNorm" ? Normalization::layernorm : Normalization::rmsnorm;
    }
    if (j.contains("position_embedding_type")) {
      const std::string p = j.at("position_embedding_type");
      TROUPE_CHECK(p == "learned_absolute" || p == "rope",
                   "position_embedding_type must be learned_absolute or rope, got ", p);
      c.position_embedding_type = p == "rope" ? PositionEmbedding::rope : PositionEmbedding::learned_absolute;
    }
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL("bad model config JSON: ", e.what());
  }
  return c;
}

}  // namespace troupe
