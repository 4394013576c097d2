// Where `troupe generate` gets a model from: a Troupe checkpoint directory (--load) or a
// Hugging Face folder (--hf), as a config, flat host f32 weights for
// ParamLayout(config, ChunkSpec::whole_model()), and the tokenizer files found beside them.
#pragma once

#include <string>

#include "kernels/tensor.hpp"
#include "model/config.hpp"

namespace troupe::apps {

struct LoadedModel {
  GptConfig config;
  Tensor weights;          // host f32 [ParamLayout(config, whole_model()).size()]
  std::string vocab_file;  // "" when the directory has none
  std::string merge_file;
};

// --hf DIR: config.json + model.safetensors (GPT2LMHeadModel or LlamaForCausalLM); vocab.json and
// merges.txt in DIR when present.
LoadedModel load_hf_model(const std::string& dir);
// --load DIR: the newest checkpoint the tracker in DIR names (any layout saved it:
// actors::read_checkpoint_params); vocab.json and merges.txt in its iteration directory when
// present. Throws naming the file or tensor at fault.
LoadedModel load_checkpoint_model(const std::string& dir);

}  // namespace troupe::apps
