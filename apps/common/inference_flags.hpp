// The flags `troupe generate` and `troupe serve` share: where the model and tokenizer come
// from, the device, and the inference engine's budgets; and what they build from them.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/generate_load.hpp"
#include "data/tokenizer.hpp"
#include "kernels/collectives.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::actors {
class Fabric;
}  // namespace troupe::actors

namespace troupe {
class ChatTemplate;
}  // namespace troupe

namespace troupe::apps {

struct InferenceFlags {
  std::string load, hf, device = "auto", dtype = "bf16";
  // --ckpt-step: the iteration --load reads (default: the tracker's).
  std::optional<int64_t> ckpt_step;
  TokenizerOptions tokenizer;  // default: the tokenizer files beside the weights
  std::string chat_template;   // --chat-template FILE; default: tokenizer_config.json's chat_template
  int64_t max_requests = 64, max_batch_tokens = 2048, max_seq_length = 0;
  int block_size = 16, tensor_parallel = 1;
  double kv_cache_gb = 2.0;
  double step_timeout_s = 120;  // a tensor-parallel step's limit
  bool no_cuda_graphs = false;
};

// Registers --load --ckpt-step (apps/common/checkpoint_flags.hpp) --hf, the tokenizer flags
// (apps/common/tokenizer_flags.hpp), --chat-template, --device --dtype --inference-max-requests
// --inference-max-batch-tokens --inference-max-seq-length --kv-block-size --kv-cache-gb
// --no-cuda-graphs --tensor-model-parallel-size --inference-step-timeout.
void add_inference_flags(CLI::App* cmd, InferenceFlags& f);

// The model, its tokenizer and where it runs. Throws naming the flag or file at fault.
struct InferenceSetup {
  LoadedModel model;
  std::unique_ptr<Tokenizer> tokenizer;
  // Generation stops after any of these (unless asked not to): the tokenizer's end-of-document
  // id and the model's eos_token_id(s).
  std::vector<int32_t> stop_tokens;
  // The chat template (--chat-template, or tokenizer_config.json's); null when there is none.
  std::shared_ptr<const ChatTemplate> chat;
  bool cuda = false;
  DType compute = DType::f32;
  int64_t max_seq_length = 0;  // --inference-max-seq-length or the model's positions
};
InferenceSetup load_inference_setup(const InferenceFlags& f);

// Model options for prompts of up to `longest` tokens.
InferenceModelOptions inference_model_options(const InferenceFlags& f, int64_t longest);
// Engine options with at most `wanted_blocks` KV blocks (0: as many as --kv-cache-gb holds).
EngineOptions engine_options(const InferenceFlags& f, const InferenceSetup& s, int64_t wanted_blocks);

// One model replica: --tensor-model-parallel-size T ranks on GPUs first_device ..
// first_device + T - 1 (or T CPU devices), their group's collectives, and each rank's shard of
// the weights loaded. Members are destroyed models first, contexts last.
struct ReplicaModels {
  std::shared_ptr<actors::Fabric> fabric;                // where the group comes from (T > 1)
  std::vector<std::unique_ptr<const Context>> contexts;  // [T]
  std::vector<std::unique_ptr<Collectives>> group;       // [T]; empty for T = 1
  std::vector<std::unique_ptr<InferenceModel>> models;   // [T]: rank r's model
  std::vector<InferenceModel*> ranks() const;            // for InferenceEngine
};
std::shared_ptr<ReplicaModels> make_replica_models(const InferenceFlags& f, const InferenceSetup& s, int first_device,
                                                   const InferenceModelOptions& options);

}  // namespace troupe::apps
