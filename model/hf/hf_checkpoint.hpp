// Reading and writing Hugging Face checkpoint folders (config.json + model.safetensors,
// or shards with a model.safetensors.index.json) for GPT2LMHeadModel, the Llama family and its
// mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE: experts one tensor each, or stacked as
// transformers 5 holds them in memory; hf_moe_mapping.hpp).
//
//   HfCheckpoint ck = read_hf_checkpoint("gpt2-dir");          // arch + our GptConfig
//   GptChunk chunk(ctx, ck.config, ChunkSpec::whole_model(), DType::bf16);
//   chunk.load_weights(load_hf_weights("gpt2-dir", chunk.layout(), ck.arch));
//   save_hf_checkpoint("out", layout, arch, host_f32, {.dtype = DType::bf16});
// The weights must be exactly the config's model: a missing tensor, a tensor the model does not
// have (e.g. a layer past num_hidden_layers), a wrong shape or dtype, a value that is not finite
// or a truncated file is an error naming the tensor and its file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/hf/hf_mapping.hpp"

namespace troupe {

struct HfCheckpoint {
  HfArch arch = HfArch::gpt2;
  GptConfig config;
  std::vector<int64_t> eos_token_ids;  // config.json's eos_token_id (an int or a list there)
};

// Called after each HF tensor is read or made: (how many so far, how many in all, its name).
using HfProgress = std::function<void(size_t done, size_t total, const std::string& hf_name)>;

// Reads config.json after checking that the weights are safetensors (a folder of
// pytorch_model.bin is refused here, saying how to convert it).
HfCheckpoint read_hf_checkpoint(const std::string& dir);
// Host f32 buffer of layout.size() elements with the checkpoint's weights; `layout` is the
// whole model (every tensor of the files must be one of its parameters).
Tensor load_hf_weights(const std::string& dir, const ParamLayout& layout, HfArch arch, const HfProgress& progress = {});

struct HfSaveOptions {
  DType dtype = DType::f32;                  // of the stored tensors (f32, bf16 or f16, rounded to nearest even)
  uint64_t max_shard_bytes = 5'000'000'000;  // larger models are split, as transformers does
  HfProgress progress = {};
};
// Writes config.json (its torch_dtype = options.dtype) and model.safetensors, or
// model-0000i-of-0000n.safetensors + model.safetensors.index.json, holding a flat host f32
// buffer. A value that is not finite, or that overflows options.dtype, is an error naming
// the tensor.
void save_hf_checkpoint(const std::string& dir, const ParamLayout& layout, HfArch arch, const Tensor& host_f32,
                        const HfSaveOptions& options = {});

}  // namespace troupe
