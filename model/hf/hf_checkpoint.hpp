// Reading and writing Hugging Face checkpoint folders (config.json + model.safetensors,
// or a sharded model.safetensors.index.json) for GPT2LMHeadModel and LlamaForCausalLM.
//
//   HfCheckpoint ck = read_hf_checkpoint("gpt2-dir");          // arch + our GptConfig
//   GptChunk chunk(ctx, ck.config, ChunkSpec::whole_model(), DType::bf16);
//   chunk.load_weights(load_hf_weights("gpt2-dir", chunk.layout(), ck.arch));
// Missing tensors, wrong shapes or dtypes, or truncated files are errors naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/hf/hf_mapping.hpp"

namespace troupe {

struct HfCheckpoint {
  HfArch arch = HfArch::gpt2;
  GptConfig config;
  std::vector<int64_t> eos_token_ids;  // config.json's eos_token_id (an int or a list there)
};

HfCheckpoint read_hf_checkpoint(const std::string& dir);
// Host f32 buffer of layout.size() elements with the checkpoint's weights.
Tensor load_hf_weights(const std::string& dir, const ParamLayout& layout, HfArch arch);
// Writes config.json and model.safetensors (f32) holding a flat host f32 buffer.
void save_hf_checkpoint(const std::string& dir, const ParamLayout& layout, HfArch arch, const Tensor& host_f32);

}  // namespace troupe
