#include "model/hf/hf_config.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "model/moe/moe_config.hpp"

namespace troupe {

namespace {

using nlohmann::json;

// Keys that change nothing we compute: bookkeeping, generation defaults of old configs,
// training-time dropout (Troupe takes its own --hidden-dropout), task heads a causal LM does
// not use.
const std::set<std::string>& harmless_keys() {
  static const std::set<std::string> keys = {
      "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
      "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
      "output_attentions", "output_hidden_states", "return_dict", "id2label", "label2id", "problem_type",
      "task_specific_params", "torchscript", "tokenizer_class", "prefix", "finetuning_task", "pruned_heads",
      "chunk_size_feed_forward", "is_decoder", "is_encoder_decoder", "tf_legacy_loss", "use_bfloat16",
      // generation defaults that old configs carry (generation_config.json holds them now)
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
      "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
      "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
      "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
      "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
      // dropout: a training setting, Troupe's own flags decide it
      "attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout",
      // GPT-2's sequence-summary head (GPT2DoubleHeadsModel), unused by a causal LM
      "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
      // Llama: the pretraining tensor-parallel degree; transformers 4 splits its matmuls by it,
      // which sums the same products (the same math)
      "pretraining_tp",
      // a training memory setting (activations recomputed in the backward pass: the same values)
      "gradient_checkpointing",
      // which attention kernel transformers picked (4.47 and 4.48 saved it by mistake): the same math
      "_attn_implementation_autoset"};
  return keys;
}

// Keys of features Troupe does not implement, read by none of its families: null (or false) is
// "not set" and accepted; any other value is refused, naming what it would change.
const std::map<std::string, std::string>& unimplemented_keys() {
  static const std::map<std::string, std::string> keys = {
      {"quantization_config", "quantized weights"},
      {"attn_logit_softcapping", "tanh soft-capping of the attention scores"},
      {"final_logit_softcapping", "tanh soft-capping of the logits"},
      {"query_pre_attn_scalar", "another attention scale than 1/sqrt(head_dim)"},
      {"attention_multiplier", "another attention scale than 1/sqrt(head_dim)"},
      {"embedding_multiplier", "scaled embeddings"},
      {"residual_multiplier", "scaled residual branches"},
      {"logits_scaling", "scaled logits"},
      {"num_experts", "a mixture of experts"},
      {"num_local_experts", "a mixture of experts"},
      {"num_experts_per_tok", "a mixture of experts"},
      {"attention_chunk_size", "chunked attention"},
      {"no_rope_layers", "layers without RoPE"},
      {"use_qk_norm", "an RMSNorm on the query and key heads this family does not have"},
      {"sliding_window", "a sliding attention window, which this family does not have"},
      {"use_sliding_window", "a sliding attention window, which this family does not have"},
      {"max_window_layers", "a sliding attention window, which this family does not have"}};
  return keys;
}

// A value for an error message, cut short (a quantization_config can be long).
std::string short_dump(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Reads the config, remembering which keys it looked at; the rest are unknown.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    TROUPE_CHECK(j_.is_object(), where_, ": not a JSON object");
  }

  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const std::string& key) {
    seen_.insert(key);
    TROUPE_CHECK(j_.contains(key), where_, ": '", key, "' is missing");
    return j_.at(key);
  }
  void mark(const std::string& key) { seen_.insert(key); }

  // A positive integer (1.9, "12" or -1 are errors).
  int64_t integer(const std::string& key) {
    const json& v = at(key);
    TROUPE_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, where_, ": '", key,
                 "' must be a positive integer, got ", v.dump());
    return v.get<int64_t>();
  }
  int64_t integer_or(const std::string& key, int64_t fallback) {
    return has(key) ? integer(key) : (mark(key), fallback);
  }
  double number_or(const std::string& key, double fallback) {
    if (!has(key)) return mark(key), fallback;
    const json& v = at(key);
    TROUPE_CHECK(v.is_number(), where_, ": '", key, "' must be a number, got ", v.dump());
    return v.get<double>();
  }
  bool boolean_or(const std::string& key, bool fallback) {
    if (!has(key)) return mark(key), fallback;
    const json& v = at(key);
    TROUPE_CHECK(v.is_boolean(), where_, ": '", key, "' must be true or false, got ", v.dump());
    return v.get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) {
    if (!has(key)) return mark(key), fallback;
    const json& v = at(key);
    TROUPE_CHECK(v.is_string(), where_, ": '", key, "' must be a string, got ", v.dump());
    return v.get<std::string>();
  }
  // A key whose only value we implement; any other is refused, naming it.
  template <typename T>
  void require(const std::string& key, const T& implemented, const T& fallback, const std::string& why) {
    T value = fallback;
    if (has(key)) at(key).get_to(value);
    mark(key);
    TROUPE_CHECK(value == implemented, where_, ": '", key, "' = ", json(value).dump(), " is not supported (", why,
                 "); Troupe implements ", json(implemented).dump());
  }

  // Every key neither read nor known to be harmless is an error: one that would change the
  // math unless null, or one we do not know at all (it may change the math too).
  void refuse_unread(const std::string& model_type) const {
    for (const auto& [key, value] : j_.items()) {
      if (seen_.count(key) || harmless_keys().count(key)) continue;
      const auto unimplemented = unimplemented_keys().find(key);
      if (unimplemented != unimplemented_keys().end()) {
        TROUPE_CHECK(value.is_null() || (value.is_boolean() && !value.get<bool>()), where_, ": '", key,
                     "' = ", short_dump(value), " is not supported (", unimplemented->second, "; model_type \"",
                     model_type, "\"); Troupe implements it only unset (null)");
        continue;
      }
      TROUPE_FAIL(where_, ": unknown key '", key, "' = ", short_dump(value), " for model_type \"", model_type,
                  "\": Troupe refuses what it cannot tell changes nothing (a silently different model is worse "
                  "than none); if it does not change this model's math, remove it from the file");
    }
  }
  const std::string& where() const { return where_; }

 private:
  const json& j_;
  std::string where_;
  std::set<std::string> seen_;
};

std::vector<int64_t> token_ids(const json& v, const std::string& where, const char* key) {
  std::vector<int64_t> out;
  if (v.is_null()) return out;
  const json list = v.is_array() ? v : json::array({v});
  for (const json& id : list) {
    TROUPE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, where, ": '", key,
                 "' must be a token id or a list of them, got ", v.dump());
    out.push_back(id.get<int64_t>());
  }
  return out;
}

void read_gpt2(Reader& r, GptConfig& c) {
  c = GptConfig::gpt2_124m();
  c.num_layers = int(r.integer("n_layer"));
  c.hidden_size = int(r.integer("n_embd"));
  c.num_attention_heads = int(r.integer("n_head"));
  c.max_position_embeddings = int(r.integer("n_positions"));
  if (r.has("n_ctx"))
    TROUPE_CHECK(r.integer("n_ctx") == c.max_position_embeddings, r.where(), ": 'n_ctx' = ", r.at("n_ctx").dump(),
                 " differs from 'n_positions' = ", c.max_position_embeddings);
  r.mark("n_ctx");
  c.seq_length = c.max_position_embeddings;
  c.vocab_size = r.integer("vocab_size");
  c.norm_epsilon = float(r.number_or("layer_norm_epsilon", 1e-5));
  c.ffn_hidden_size = int(r.integer_or("n_inner", 0));
  const std::string act = r.string_or("activation_function", "gelu_new");
  TROUPE_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", r.where(), ": 'activation_function' = \"", act,
               "\" is not supported; Troupe implements the tanh GELU (gelu_new, gelu_pytorch_tanh)");
  r.require("scale_attn_weights", true, true, "attention scores not divided by sqrt(head_dim)");
  r.require("scale_attn_by_inverse_layer_idx", false, false, "attention scores divided by the layer index");
  r.require("reorder_and_upcast_attn", false, false, "a different attention order and precision");
  r.require("add_cross_attention", false, false, "cross-attention layers");
  c.untie_embeddings_and_output_weights = !r.boolean_or("tie_word_embeddings", true);
}

// RoPE: transformers 4's rope_theta + rope_scaling, or 5's rope_parameters.
void read_rope(Reader& r, GptConfig& c) {
  json params = json::object();
  if (r.has("rope_parameters")) {
    params = r.at("rope_parameters");
    TROUPE_CHECK(params.is_object(), r.where(), ": 'rope_parameters' must be an object, got ", params.dump());
    TROUPE_CHECK(!r.has("rope_scaling") || r.at("rope_scaling") == params || !r.at("rope_scaling").is_object(),
                 r.where(), ": both 'rope_scaling' and 'rope_parameters', and they differ");
  } else if (r.has("rope_scaling")) {
    params = r.at("rope_scaling");
    TROUPE_CHECK(params.is_object(), r.where(), ": 'rope_scaling' must be an object or null, got ", params.dump());
  }
  r.mark("rope_parameters");
  r.mark("rope_scaling");
  double theta = r.number_or("rope_theta", 10000.0);
  if (params.contains("rope_theta")) {
    const json& t = params.at("rope_theta");
    TROUPE_CHECK(t.is_number(), r.where(), ": rope_theta must be a number, got ", t.dump());
    TROUPE_CHECK(!r.has("rope_theta") || r.at("rope_theta").get<double>() == t.get<double>(), r.where(),
                 ": 'rope_theta' = ", r.at("rope_theta").dump(), " and rope_parameters.rope_theta = ", t.dump(),
                 " differ");
    theta = t.get<double>();
  }
  TROUPE_CHECK(theta > 0, r.where(), ": rope_theta must be positive, got ", theta);
  c.rotary_base = float(theta);
  const double partial = r.number_or("partial_rotary_factor", params.value("partial_rotary_factor", 1.0));
  TROUPE_CHECK(partial == 1.0, r.where(), ": partial_rotary_factor = ", partial,
               " is not supported (RoPE on part of each head); Troupe rotates whole heads");
  // "type" is the older spelling of "rope_type".
  const std::string type = params.value("rope_type", params.value("type", std::string("default")));
  std::set<std::string> allowed = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
  if (type == "llama3") {
    RopeScaling& s = c.rope_scaling;
    s.llama3 = true;
    for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      TROUPE_CHECK(params.contains(key) && params.at(key).is_number(), r.where(),
                   ": the llama3 RoPE scaling needs a number '", key, "', got ", params.dump());
      allowed.insert(key);
    }
    s.factor = params.at("factor").get<float>();
    s.low_freq_factor = params.at("low_freq_factor").get<float>();
    s.high_freq_factor = params.at("high_freq_factor").get<float>();
    s.original_max_positions = params.at("original_max_position_embeddings").get<float>();
  } else {
    TROUPE_CHECK(type == "default", r.where(), ": RoPE scaling rope_type \"", type,
                 "\" is not supported; Troupe implements the default RoPE and \"llama3\"");
  }
  for (const auto& [key, value] : params.items())
    TROUPE_CHECK(allowed.count(key), r.where(), ": the RoPE settings' '", key, "' = ", value.dump(),
                 " is not supported with rope_type \"", type, "\"");
}

// The sliding window a config names ('sliding_window', null or absent: none).
int64_t sliding_window_of(Reader& r) {
  const int64_t window = r.has("sliding_window") ? r.integer("sliding_window") : 0;
  r.mark("sliding_window");
  return window;
}

// Qwen2's and Qwen3's sliding window: off unless use_sliding_window; then it applies to the layers
// from max_window_layers on (transformers 5 spells that out in layer_types). Troupe's window is
// the same for every layer: all windowed or none.
void read_qwen_sliding_window(Reader& r, GptConfig& c) {
  const bool sliding = r.boolean_or("use_sliding_window", false);
  if (!sliding) {  // transformers ignores the window then (Qwen2-MoE configs write 0 there)
    if (r.has("sliding_window"))
      TROUPE_CHECK(r.at("sliding_window").is_number_integer() && r.at("sliding_window").get<int64_t>() >= 0, r.where(),
                   ": 'sliding_window' must be a non-negative integer or null, got ", r.at("sliding_window").dump());
    r.mark("sliding_window");
  }
  int64_t from_layer = c.num_layers;  // 0 is meaningful here: every layer windowed
  if (r.has("max_window_layers")) {
    const json& v = r.at("max_window_layers");
    TROUPE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, r.where(),
                 ": 'max_window_layers' must be a non-negative integer, got ", v.dump());
    from_layer = v.get<int64_t>();
  }
  r.mark("max_window_layers");
  const int64_t window = sliding ? sliding_window_of(r) : 0;
  const bool windowed = sliding && window > 0 && from_layer < c.num_layers;
  TROUPE_CHECK(!windowed || from_layer <= 0, r.where(),
               ": 'use_sliding_window' = true with 'max_window_layers' = ", from_layer, " of ", c.num_layers,
               " layers is not supported (a window on some layers only; Troupe windows all layers or none)");
  if (windowed) c.sliding_window = int(window);
}

// transformers 5's per-layer attention kinds: each must be what the other keys say (one kind
// for every layer: Troupe windows all layers or none).
void read_layer_types(Reader& r, const GptConfig& c) {
  if (r.has("layer_types")) {
    const json& types = r.at("layer_types");
    const std::string expected = c.sliding_window > 0 ? "sliding_attention" : "full_attention";
    TROUPE_CHECK(types.is_array() && types.size() == size_t(c.num_layers), r.where(), ": 'layer_types' ",
                 short_dump(types), " must list one kind for each of the ", c.num_layers, " layers");
    for (const json& t : types)
      TROUPE_CHECK(t == expected, r.where(), ": 'layer_types' ", short_dump(types),
                   " does not match the sliding window settings, or mixes layer types "
                   "(not supported: Troupe windows all layers or none)");
  }
  r.mark("layer_types");
}

bool is_moe_family(const std::string& model_type) {
  return model_type == "mixtral" || model_type == "qwen2_moe" || model_type == "qwen3_moe";
}

// How many routed experts: Mixtral's num_local_experts, Qwen2-MoE's num_experts; Qwen3-MoE's is
// num_experts in transformers 4 and num_local_experts in 5 (either; both must agree).
int64_t read_num_experts(Reader& r, const std::string& model_type) {
  if (model_type == "mixtral") return r.integer("num_local_experts");
  if (model_type == "qwen2_moe") return r.integer("num_experts");
  if (r.has("num_experts") && r.has("num_local_experts"))
    TROUPE_CHECK(r.integer("num_experts") == r.integer("num_local_experts"), r.where(),
                 ": 'num_experts' = ", r.at("num_experts").dump(),
                 " and 'num_local_experts' = ", r.at("num_local_experts").dump(), " differ");
  return r.integer(r.has("num_local_experts") ? "num_local_experts" : "num_experts");
}

// Qwen-MoE layer l has experts when l is not in mlp_only_layers and (l + 1) % decoder_sparse_step
// == 0, else a dense MLP of intermediate_size: Megatron's --moe-layer-freq as a 0/1 list (or 1
// when every layer has experts). Entries of mlp_only_layers past the last layer match no layer.
MoeLayerFreq read_qwen_sparse_layers(Reader& r, int num_layers) {
  const int64_t step = r.integer_or("decoder_sparse_step", 1);
  std::set<int64_t> dense;
  if (r.has("mlp_only_layers")) {
    const json& v = r.at("mlp_only_layers");
    TROUPE_CHECK(v.is_array(), r.where(), ": 'mlp_only_layers' must be a list of layer indices, got ", short_dump(v));
    for (const json& l : v) {
      TROUPE_CHECK(l.is_number_integer(), r.where(), ": 'mlp_only_layers' must be a list of layer indices, got ",
                   short_dump(v));
      dense.insert(l.get<int64_t>());
    }
  }
  r.mark("mlp_only_layers");
  MoeLayerFreq f;
  for (int l = 0; l < num_layers; ++l) f.pattern.push_back(!dense.count(l) && (l + 1) % step == 0 ? 1 : 0);
  if (std::find(f.pattern.begin(), f.pattern.end(), 0) == f.pattern.end()) f.pattern.clear();  // every layer: 1
  return f;
}

// The experts of Mixtral, Qwen2-MoE and Qwen3-MoE as Megatron's MoE flags. Their routers take
// softmax over all E logits, then the top k; Mixtral renormalizes the k (the same as Megatron's
// default: top k of the logits, softmax over the k), Qwen does only with norm_topk_prob (false:
// --moe-router-pre-softmax, the k keep their probabilities). Their outputs are dropless.
// HF's load-balancing loss (output_router_logits) is computed over every layer's logits at once,
// not Megatron's per-layer aux loss: refused; without it router_aux_loss_coef changes nothing.
void read_hf_moe(Reader& r, const std::string& model_type, GptConfig& c) {
  MoeConfig& m = c.moe;
  m.num_experts = int(read_num_experts(r, model_type));
  m.moe_router_topk = int(r.integer("num_experts_per_tok"));
  m.moe_router_score_function = MoeScoreFunction::softmax;
  if (model_type == "mixtral") {  // every layer MoE, its experts of intermediate_size
    const double jitter = r.number_or("router_jitter_noise", 0.0);
    TROUPE_CHECK(jitter == 0.0, r.where(), ": 'router_jitter_noise' = ", jitter,
                 " is not supported (random noise on the router's input in training); Troupe implements 0");
    m.moe_router_pre_softmax = false;
  } else {
    m.moe_router_pre_softmax = !r.boolean_or("norm_topk_prob", false);
    m.moe_ffn_hidden_size = int(r.integer("moe_intermediate_size"));
    m.moe_layer_freq = read_qwen_sparse_layers(r, c.num_layers);
    if (model_type == "qwen2_moe") {  // output = experts + sigmoid(x . g) * shared_expert(x)
      m.moe_shared_expert_intermediate_size = int(r.integer("shared_expert_intermediate_size"));
      m.moe_shared_expert_gate = true;
    }
  }
  r.require("output_router_logits", false, false,
            "transformers' load-balancing loss over all layers' router logits at once, not Megatron's per-layer "
            "--moe-aux-loss-coeff");
  r.number_or("router_aux_loss_coef", 0.0);  // read by transformers only with output_router_logits
}

void read_llama(Reader& r, const std::string& model_type, GptConfig& c) {
  // Qwen3's config class has other defaults than Llama's for keys a file may leave out.
  const bool qwen3 = model_type == "qwen3";
  const bool moe = is_moe_family(model_type);
  // The MoE families' config classes have defaults of their own for these: the file must name them.
  if (moe) {
    std::vector<std::string> needed = {"num_key_value_heads", "max_position_embeddings", "rms_norm_eps"};
    if (model_type == "qwen3_moe") needed.push_back("head_dim");
    for (const std::string& key : needed)
      TROUPE_CHECK(r.has(key), r.where(), ": '", key, "' is missing (model_type \"", model_type,
                   "\" configs name it; Troupe does not guess its default)");
  }
  const int heads = int(r.integer("num_attention_heads"));
  c = GptConfig::llama_style(int(r.integer("num_hidden_layers")), int(r.integer("hidden_size")), heads,
                             int(r.integer_or("num_key_value_heads", qwen3 ? 32 : heads)),
                             int(r.integer("intermediate_size")));
  c.kv_channels = int(r.integer_or("head_dim", qwen3 ? 128 : 0));
  c.max_position_embeddings = int(r.integer_or("max_position_embeddings", qwen3 ? 32768 : 2048));
  c.seq_length = c.max_position_embeddings;
  c.vocab_size = r.integer("vocab_size");
  c.norm_epsilon = float(r.number_or("rms_norm_eps", 1e-6));
  r.require<std::string>("hidden_act", "silu", "silu", "another MLP activation");
  r.require("attention_bias", false, false, "bias on the attention projections");
  r.require("mlp_bias", false, false, "bias on the MLP projections");
  c.untie_embeddings_and_output_weights = !r.boolean_or("tie_word_embeddings", false);
  read_rope(r, c);
  if (model_type == "qwen2") {  // Qwen2 / Qwen2.5: Llama's math with a bias on q, k and v
    c.add_qkv_bias = true;
    read_qwen_sliding_window(r, c);
  }
  if (model_type == "qwen2_moe") {  // Qwen2's attention (transformers 5 names its q, k, v bias qkv_bias)
    c.add_qkv_bias = r.boolean_or("qkv_bias", true);
    read_qwen_sliding_window(r, c);
  }
  if (qwen3 || model_type == "qwen3_moe") {  // Qwen3: Llama's math with an RMSNorm on each query and key head
    c.qk_layernorm = true;
    read_qwen_sliding_window(r, c);
  }
  // Llama's math, windowed (Mixtral's attention is Mistral's)
  if (model_type == "mistral" || model_type == "mixtral") c.sliding_window = int(sliding_window_of(r));
  read_layer_types(r, c);
  if (moe) read_hf_moe(r, model_type, c);
}

// The config.json key behind each Megatron flag GptConfig::validate names, so that a config whose
// sizes make no model is refused in the file's own words ("n_embd 128 is not divisible by n_head 3").
std::string in_hf_words(std::string message, HfArch arch) {
  static const std::vector<std::pair<std::string, std::string>> gpt2 = {
      {" (or set --kv-channels)", ""},  // GPT-2 has no head_dim key
      {"--num-attention-heads", "n_head"},     {"--hidden-size", "n_embd"},     {"--num-layers", "n_layer"},
      {"--ffn-hidden-size", "n_inner"},        {"--seq-length", "n_positions"}, {"--vocab-size", "vocab_size"},
      {"--norm-epsilon", "layer_norm_epsilon"}};
  static const std::vector<std::pair<std::string, std::string>> llama = {
      {"--num-attention-heads", "num_attention_heads"},
      {"--num-query-groups", "num_key_value_heads"},
      {"--hidden-size", "hidden_size"},
      {"--num-layers", "num_hidden_layers"},
      {"--ffn-hidden-size", "intermediate_size"},
      {"--seq-length", "max_position_embeddings"},
      {"--vocab-size", "vocab_size"},
      {"--norm-epsilon", "rms_norm_eps"},
      {"--kv-channels", "head_dim"},
      {"--rope-scaling-factor", "rope_scaling.factor"}};
  // Mixtral's experts are intermediate_size (no dense MLP); Qwen-MoE's have a key of their own.
  const std::vector<std::pair<std::string, std::string>> moe = {
      {"--num-experts", arch == HfArch::mixtral ? "num_local_experts" : "num_experts"},
      {"--moe-router-topk", "num_experts_per_tok"},
      {"--moe-ffn-hidden-size", arch == HfArch::mixtral ? "intermediate_size" : "moe_intermediate_size"},
      {"--moe-shared-expert-intermediate-size", "shared_expert_intermediate_size"}};
  for (const auto& [flag, key] : moe) {
    for (size_t at = message.find(flag); at != std::string::npos; at = message.find(flag, at + key.size()))
      message.replace(at, flag.size(), key);
  }
  for (const auto& [flag, key] : arch == HfArch::gpt2 ? gpt2 : llama) {
    for (size_t at = message.find(flag); at != std::string::npos; at = message.find(flag, at + key.size()))
      message.replace(at, flag.size(), key);
  }
  return message;
}

}  // namespace

HfConfig read_hf_config(const json& j, const std::string& where) {
  Reader r(j, where);
  HfConfig hf;
  try {
    hf.model_type = r.string_or("model_type", "");
    const std::string expected = hf.model_type == "gpt2"        ? "GPT2LMHeadModel"
                                 : hf.model_type == "llama"     ? "LlamaForCausalLM"
                                 : hf.model_type == "mistral"   ? "MistralForCausalLM"
                                 : hf.model_type == "qwen2"     ? "Qwen2ForCausalLM"
                                 : hf.model_type == "qwen3"     ? "Qwen3ForCausalLM"
                                 : hf.model_type == "mixtral"   ? "MixtralForCausalLM"
                                 : hf.model_type == "qwen2_moe" ? "Qwen2MoeForCausalLM"
                                 : hf.model_type == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                                                                : "";
    TROUPE_CHECK(!expected.empty(), where, ": model_type \"", hf.model_type,
                 "\" is not supported (Troupe reads gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe and "
                 "qwen3_moe)");
    if (r.has("architectures")) {
      for (const json& a : r.at("architectures"))
        TROUPE_CHECK(a == expected || (hf.model_type == "gpt2" && a == "GPT2Model"), where, ": architectures ",
                     r.at("architectures").dump(), " is not ", expected, " (another head, not a causal LM?)");
    }
    if (hf.model_type == "gpt2") {
      hf.arch = HfArch::gpt2;
      read_gpt2(r, hf.model);
    } else {
      hf.arch = hf.model_type == "mixtral"     ? HfArch::mixtral
                : is_moe_family(hf.model_type) ? HfArch::qwen_moe
                                               : HfArch::llama;
      read_llama(r, hf.model_type, hf.model);
    }
    if (r.has("bos_token_id")) {
      const std::vector<int64_t> bos = token_ids(r.at("bos_token_id"), where, "bos_token_id");
      if (!bos.empty()) hf.bos_token_id = bos.front();
    }
    if (r.has("eos_token_id")) hf.eos_token_ids = token_ids(r.at("eos_token_id"), where, "eos_token_id");
    hf.dtype = r.has("dtype") ? r.string_or("dtype", "") : r.string_or("torch_dtype", "");
  } catch (const json::exception& e) {
    TROUPE_FAIL(where, ": ", e.what());
  }
  hf.model.hidden_dropout = 0.0f;
  hf.model.attention_dropout = 0.0f;
  r.refuse_unread(hf.model_type);
  try {
    hf.model.validate();
  } catch (const Error& e) {
    TROUPE_FAIL(where, ": ", in_hf_words(e.what(), hf.arch));
  }
  return hf;
}

}  // namespace troupe
