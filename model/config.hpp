// GPT model configuration with Megatron-LM's names and defaults.
//
// Two families are first-class:
//   GPT-2:        LayerNorm, learned absolute positions, GELU(tanh), biases, tied embeddings
//   Llama-style:  RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases, untied output
// with Qwen2's bias on q, k, v (add_qkv_bias) and Qwen3's per-head q/k norm (qk_layernorm).
//
//   GptConfig c = GptConfig::gpt2_124m();
//   c.validate();                          // throws with the offending flag named
//   int64_t vp = c.padded_vocab_size();    // 50257 -> 50304
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "kernels/rope.hpp"
#include "model/moe/moe_config.hpp"

namespace troupe {

enum class Normalization { layernorm, rmsnorm };
enum class PositionEmbedding { learned_absolute, rope };

struct GptConfig {
  int num_layers = 12;
  int hidden_size = 768;
  int ffn_hidden_size = 0;  // 0: 4 * hidden_size
  int num_attention_heads = 12;
  int num_query_groups = 0;  // 0: num_attention_heads (plain multi-head attention)
  int kv_channels = 0;       // head dim; 0: hidden_size / num_attention_heads
  int seq_length = 1024;
  int max_position_embeddings = 0;  // 0: seq_length
  int64_t vocab_size = 50257;       // the tokenizer's vocabulary
  int make_vocab_size_divisible_by = 128;
  Normalization normalization = Normalization::layernorm;
  float norm_epsilon = 1e-5f;
  PositionEmbedding position_embedding_type = PositionEmbedding::learned_absolute;
  float rotary_base = 10000.0f;
  RopeScaling rope_scaling;  // --use-rope-scaling, --rope-scaling-factor: Llama 3.1's frequency scaling
  bool swiglu = false;
  bool disable_bias_linear = false;
  bool add_qkv_bias = false;  // --add-qkv-bias: a bias on the QKV projection even without the others (Qwen2)
  // --qk-layernorm: each query and key head normalized (RMSNorm, a weight [head_dim] shared by the
  // query heads and one by the key heads) after the QKV projection, before RoPE (Qwen3)
  bool qk_layernorm = false;
  // Sliding-window attention (Mistral): a token attends to the last `sliding_window` positions,
  // itself included (HF's sliding_window; Megatron's --window-size (sliding_window - 1, 0)).
  // 0: every earlier position.
  int sliding_window = 0;
  bool untie_embeddings_and_output_weights = false;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  // Mixture of experts (--num-experts and the --moe-* flags): the MLP of the layers
  // moe.is_moe_layer picks is an MoE block (model/moe/moe_mlp.hpp); disabled: a dense model.
  MoeConfig moe;

  // Derived sizes (after defaults are applied).
  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  int head_dim() const { return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads; }
  int max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  // Rows of the fused QKV projection: (H + 2G) * D.
  int qkv_size() const { return (num_attention_heads + 2 * query_groups()) * head_dim(); }
  // Vocabulary padded to a multiple of make_vocab_size_divisible_by (times the TP size).
  int64_t padded_vocab_size(int tensor_parallel_size = 1) const;
  bool has_bias() const { return !disable_bias_linear; }
  bool has_qkv_bias() const { return has_bias() || add_qkv_bias; }
  // Whether layer l (global, 0-based) has an MoE MLP instead of the dense one.
  bool is_moe_layer(int l) const { return moe.enabled() && moe.is_moe_layer(l, num_layers); }

  // Throws troupe::Error naming the Megatron flag that is wrong.
  void validate() const;
  // Throws naming the sizes when heads, query groups or the MLP do not split over `tp` ranks.
  void validate_tensor_parallel(int tp) const;
  // Parameter count (the padded vocabulary included).
  int64_t num_parameters() const;
  // The parameters a token runs through: num_parameters() less the routed experts it is not sent
  // to (an MoE layer's E - top-k); equal to it for a dense model. FLOPs per token count these.
  int64_t num_active_parameters() const;

  static GptConfig gpt2_124m();
  static GptConfig gpt2_350m();
  // A Llama-style model of the given size (RMSNorm, RoPE, SwiGLU, GQA, no bias, untied).
  static GptConfig llama_style(int layers, int hidden, int heads, int groups, int ffn);
  // Named presets: gpt2-124m, gpt2-350m, gpt2-tiny, llama-tiny.
  static GptConfig preset(const std::string& name);
};

nlohmann::json to_json(const GptConfig& c);
GptConfig gpt_config_from_json(const nlohmann::json& j);
const char* normalization_name(Normalization n);
const char* position_embedding_name(PositionEmbedding p);

}  // namespace troupe
