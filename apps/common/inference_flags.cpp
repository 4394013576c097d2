#include "apps/common/inference_flags.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "actors/fabric/fabric.hpp"
#include "apps/common/checkpoint_flags.hpp"
#include "apps/common/count_flags.hpp"
#include "apps/common/float_flags.hpp"
#include "apps/common/tokenizer_flags.hpp"
#include "data/chat/chat_template.hpp"
#include "base/check.hpp"

namespace troupe::apps {

void add_inference_flags(CLI::App* cmd, InferenceFlags& f) {
  cmd->add_option("--load", f.load, "Troupe checkpoint directory (its newest checkpoint)");
  add_ckpt_step_flag(cmd, f.ckpt_step);
  cmd->add_option("--hf", f.hf, "Hugging Face folder: config.json + model.safetensors (GPT-2 or Llama)");
  add_tokenizer_flags(cmd, f.tokenizer);  // default: the tokenizer files beside the weights
  cmd->add_option("--chat-template", f.chat_template,
                  "a Jinja chat template file (default: the chat_template of the tokenizer's tokenizer_config.json)");
  cmd->add_option("--device", f.device, "cpu, cuda, or auto (cuda when a GPU is visible)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--dtype", f.dtype, "CUDA compute dtype: bf16, f16, or f32 (slower; exact against an fp32 reference)")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  cmd->add_option("--inference-max-requests", f.max_requests, "requests decoded together at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--inference-max-batch-tokens", f.max_batch_tokens, "tokens per forward step at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--inference-max-seq-length", f.max_seq_length,
                  "prompt + generated tokens at most (default: the model's positions)")
      ->check(non_negative_count());
  cmd->add_option("--kv-block-size", f.block_size, "tokens per KV-cache block")->check(CLI::PositiveNumber);
  cmd->add_option("--kv-cache-gb", f.kv_cache_gb, "KV-cache memory at most, GiB (per replica, over its T devices)")
      ->check(positive_finite_float());
  cmd->add_option("--tensor-model-parallel-size", f.tensor_parallel,
                  "devices per model replica (tensor parallelism: heads, MLP columns and vocabulary split)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--inference-step-timeout", f.step_timeout_s,
                  "seconds a tensor-parallel replica's step may take before its group is aborted and the step fails")
      ->check(positive_finite_float());
  cmd->add_flag("--no-cuda-graphs", f.no_cuda_graphs, "run decode steps op by op instead of replaying CUDA graphs");
}

namespace {

// The tokenizer's options: the flags when given, else the files beside the weights.
TokenizerOptions tokenizer_options(const InferenceFlags& f, const LoadedModel& m) {
  const std::optional<TokenizerOptions> t = tokenizer_flags_given(f.tokenizer) ? f.tokenizer : tokenizer_in(m.files);
  TROUPE_CHECK(t.has_value(), "no tokenizer: ", f.hf.empty() ? "--load " + f.load : "--hf " + f.hf,
               " has no tokenizer.json, nor vocab.json and merges.txt; pass --tokenizer-model, or --vocab-file and "
               "--merge-file");
  return *t;
}

std::unique_ptr<Tokenizer> tokenizer_for(const TokenizerOptions& t, const LoadedModel& m) {
  auto tok = build_tokenizer(t);
  TROUPE_CHECK(tok->vocab_size() <= m.config.vocab_size, "the tokenizer (",
               t.tokenizer_model.empty() ? t.vocab_file : t.tokenizer_model, ") has ", tok->vocab_size(),
               " ids, the model only ", m.config.vocab_size);
  return tok;
}

// The tokenizer_config.json that goes with the tokenizer, or "" (a GPT-2 tokenizer has none).
std::string tokenizer_config_path(const TokenizerOptions& t) {
  if (t.type != "HuggingFaceTokenizer") return "";
  const std::filesystem::path path = std::filesystem::path(hf_tokenizer_dir(t)) / "tokenizer_config.json";
  return std::filesystem::exists(path) ? path.string() : "";
}

std::shared_ptr<const ChatTemplate> chat_template_for(const InferenceFlags& f, const TokenizerOptions& t) {
  const std::string config_path = tokenizer_config_path(t);
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (!config_path.empty()) {
    std::ifstream in(config_path);
    config = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
    TROUPE_CHECK(config.is_object(), config_path, ": not a JSON object");
  }
  if (!f.chat_template.empty())
    return std::make_shared<const ChatTemplate>(ChatTemplate::from_file(f.chat_template, config));
  if (config.contains("chat_template") && !config.at("chat_template").is_null())
    return std::make_shared<const ChatTemplate>(ChatTemplate::from_tokenizer_config(config_path));
  return nullptr;
}

std::vector<int32_t> stop_tokens_for(const Tokenizer& tok, const LoadedModel& m) {
  std::vector<int32_t> out = {tok.eod()};
  for (int32_t id : m.eos_token_ids)
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  return out;
}

}  // namespace

InferenceSetup load_inference_setup(const InferenceFlags& f) {
  TROUPE_CHECK(f.load.empty() != f.hf.empty(), "pass exactly one of --load DIR (a Troupe checkpoint) and --hf DIR");
  InferenceSetup s;
  s.cuda = f.device == "cuda" || (f.device == "auto" && cuda_available());
  s.compute = s.cuda ? dtype_from_name(f.dtype) : DType::f32;
  s.model = f.hf.empty() ? load_checkpoint_model(f.load, f.ckpt_step) : load_hf_model(f.hf);
  check_inference_moe(s.model.config, f.tensor_parallel);  // before the (slow) replica: names the flag
  (void)ParamLayout(s.model.config, ChunkSpec::whole_model(), {0, f.tensor_parallel});  // names what does not split
  const TokenizerOptions tokenizer = tokenizer_options(f, s.model);
  s.tokenizer = tokenizer_for(tokenizer, s.model);
  s.stop_tokens = stop_tokens_for(*s.tokenizer, s.model);
  s.chat = chat_template_for(f, tokenizer);
  s.max_seq_length = f.max_seq_length > 0 ? f.max_seq_length : s.model.config.max_positions();
  return s;
}

InferenceModelOptions inference_model_options(const InferenceFlags& f, int64_t longest) {
  const int64_t tokens = std::max(f.max_batch_tokens, longest);
  return {.max_tokens = tokens, .max_sequences = std::min(f.max_requests, tokens), .cuda_graphs = !f.no_cuda_graphs};
}

EngineOptions engine_options(const InferenceFlags& f, const InferenceSetup& s, int64_t wanted_blocks) {
  const int64_t budget =
      KvCache::blocks_in_bytes(s.model.config, s.compute, f.block_size, size_t(f.kv_cache_gb * double(1 << 30)));
  const int64_t blocks = wanted_blocks > 0 ? std::min(wanted_blocks, budget) : budget;
  TROUPE_CHECK(f.step_timeout_s > 0, "--inference-step-timeout must be positive, got ", f.step_timeout_s);
  return {.num_blocks = std::max<int64_t>(1, blocks),
          .block_size = f.block_size,
          .max_sequence_length = s.max_seq_length,
          .step_timeout_s = f.step_timeout_s};
}

std::vector<InferenceModel*> ReplicaModels::ranks() const {
  std::vector<InferenceModel*> out;
  for (const auto& m : models) out.push_back(m.get());
  return out;
}

std::shared_ptr<ReplicaModels> make_replica_models(const InferenceFlags& f, const InferenceSetup& s, int first_device,
                                                   const InferenceModelOptions& options) {
  const int T = f.tensor_parallel;
  auto r = std::make_shared<ReplicaModels>();
  std::vector<const Context*> members;
  for (int t = 0; t < T; ++t) {
    r->contexts.push_back(std::make_unique<const Context>(s.cuda ? Context::cuda(first_device + t) : Context::cpu()));
    members.push_back(r->contexts.back().get());
  }
  if (T > 1) {  // members of this process: memory between CPU devices, NCCL between GPUs
    r->fabric = actors::Fabric::init();
    actors::GroupOptions group;
    group.name = str_cat("inference tp group from device ", first_device);
    group.launch_together = true;  // the ranks step in lockstep, each on its own thread
    r->group = r->fabric->make_group(std::vector<int>(size_t(T), r->fabric->process()), members, group);
  }
  const ParamLayout whole(s.model.config, ChunkSpec::whole_model());
  for (int t = 0; t < T; ++t) {
    const Context& ctx = *r->contexts[size_t(t)];
    ctx.activate();
    const TensorParallel tp{{t, T}, false, T > 1 ? r->group[size_t(t)].get() : nullptr};
    r->models.push_back(std::make_unique<InferenceModel>(ctx, s.model.config, s.compute, options, tp));
    InferenceModel& m = *r->models.back();
    m.load_weights(T == 1 ? s.model.weights : shard_params(whole, s.model.weights, m.layout()));
    for (const auto& [layer, bias] : s.model.expert_bias) m.load_expert_bias(layer, bias);
  }
  r->contexts[0]->activate();
  return r;
}

}  // namespace troupe::apps
