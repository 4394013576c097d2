// Where `troupe generate` gets a model from: a Troupe checkpoint directory (--load) or a
// Hugging Face folder (--hf), as a config, flat host f32 weights for
// ParamLayout(config, ChunkSpec::whole_model()), and the tokenizer files found beside them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/config.hpp"

namespace troupe::apps {

struct LoadedModel {
  GptConfig config;
  Tensor weights;     // host f32 [ParamLayout(config, whole_model()).size()]
  std::string files;  // the folder with its tokenizer (and generation) files, if it has them
  // End-of-sequence ids besides the tokenizer's: config.json's and generation_config.json's
  // eos_token_id (Llama 3's <|eot_id|> and <|end_of_text|>), as HF's generate and vLLM stop at.
  std::vector<int32_t> eos_token_ids;
  // MoE with --moe-router-enable-expert-bias: each MoE layer's learned expert bias, host f32 [E]
  // (a checkpoint's decoder.layers.N.mlp.router.expert_bias), for InferenceModel::load_expert_bias.
  std::map<int, Tensor> expert_bias;
};

// --hf DIR: config.json + model.safetensors (an architecture model/hf reads).
LoadedModel load_hf_model(const std::string& dir);
// --load DIR: the checkpoint of iteration `step` in DIR (--ckpt-step), or without one the
// newest, which the tracker names (any layout saved it: actors::read_checkpoint_params); its
// files are in its iteration directory. Throws naming the file or tensor at fault, and for a
// broken checkpoint the newest intact one (storage/checkpoint_catalog.hpp).
LoadedModel load_checkpoint_model(const std::string& dir, std::optional<int64_t> step = std::nullopt);

}  // namespace troupe::apps
