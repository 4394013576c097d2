// How Hugging Face `transformers` checkpoints map onto our parameter layout, both ways.
//
// Each of our parameters is a row-wise concatenation of one or more HF tensors, each
// possibly transposed:
//   GPT2LMHeadModel:  h.{i}.attn.c_attn.weight [C, 3C] (Conv1D, in x out) -> linear_qkv.weight [3C, C] (transposed);
//                     transformer.wte.weight [V, C] -> word_embeddings rows [0, V) (padded rows are 0)
//   LlamaForCausalLM: q_proj [H*D, C] ; k_proj [G*D, C] ; v_proj [G*D, C] -> linear_qkv.weight rows;
//                     gate_proj [F, C] ; up_proj [F, C] -> linear_fc1.weight rows ([gate; up] for SwiGLU);
//                     (Qwen2) q/k/v_proj.bias -> linear_qkv.bias; (Qwen3) self_attn.q_norm.weight [D],
//                     self_attn.k_norm.weight [D] -> self_attention.q_layernorm.weight, k_layernorm.weight
//   MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM: the Llama family's names, the
//                     MoE layers' router and experts as hf_moe_mapping.hpp says
// Our fused QKV rows are [all query heads | all key heads | all value heads], which is
// GPT-2's c_attn order and Llama's q/k/v concatenation; RoPE is HF's rotate-half form.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/tensor.hpp"
#include "model/config.hpp"
#include "model/hf/hf_config.hpp"
#include "model/param_layout.hpp"

namespace troupe {

// One HF tensor that fills rows [row_offset, row_offset + rows) of one of our parameters.
struct HfPiece {
  std::string hf_name;
  Shape hf_shape;
  bool transpose = false;  // HF stores [in, out] (GPT-2 Conv1D)
  int64_t row_offset = 0;
  // >= 0: the piece is slice [hf_index] of an HF tensor of shape hf_shape, stacked along its
  // first dimension (transformers 5's fused experts, HfExpertLayout::fused).
  int64_t hf_index = -1;
};

// How an MoE model's files hold the experts: one tensor per expert and projection (what
// save_pretrained writes), or all experts of a layer stacked (transformers 5's in-memory
// gate_up_proj / down_proj, in files saved from its state_dict). Export writes per_expert.
enum class HfExpertLayout { per_expert, fused };

// The HF architecture that holds a model of `config` (Llama for RMSNorm models, else GPT-2; an
// MoE one Mixtral or Qwen-MoE, hf_moe_arch_for).
HfArch hf_arch_for(const GptConfig& config);
// "GPT-2", "Llama", "Mixtral", "Qwen-MoE": for messages.
const char* hf_arch_name(HfArch arch);
// The config.json of a model of `config` (transformers 4.x layout, which 5.x reads too): a Llama
// with add_qkv_bias is written as Qwen2, one with qk_layernorm as Qwen3.
nlohmann::json hf_config_from_gpt(const GptConfig& config, HfArch arch);

// The HF pieces of our parameter `name`. `prefix` is prepended to GPT-2 names
// ("transformer." in GPT2LMHeadModel files, "" in bare GPT2Model files).
std::vector<HfPiece> hf_pieces(const GptConfig& config, HfArch arch, const std::string& name,
                               const std::string& prefix = "transformer.",
                               HfExpertLayout experts = HfExpertLayout::per_expert);

// Fills a host f32 buffer of layout.size() elements from HF tensors. `get(hf_name, shape)`
// returns a host f32 tensor of exactly that shape or throws naming it (a fused piece's whole
// stacked tensor: a getter may keep the last one, as the experts of a layer come one after another).
using HfTensorGetter = std::function<Tensor(const std::string& hf_name, const Shape& shape)>;
void import_hf(const ParamLayout& layout, HfArch arch, const HfTensorGetter& get, const Tensor& host_f32,
               const std::string& prefix = "transformer.", HfExpertLayout experts = HfExpertLayout::per_expert);

// Host f32 HF tensors (name, tensor) holding the values of a flat host f32 buffer
// (parameters or gradients). A tied output layer appears once, as the embedding.
std::vector<std::pair<std::string, Tensor>> export_hf(const ParamLayout& layout, HfArch arch, const Tensor& host_f32,
                                                      const std::string& prefix = "transformer.");
// One of them: the host f32 HF tensor `piece` of parameter `param` (one of hf_pieces' answers),
// so that a writer can make them one at a time.
Tensor export_hf_piece(const ParamInfo& param, const HfPiece& piece, const Tensor& host_f32);

}  // namespace troupe
