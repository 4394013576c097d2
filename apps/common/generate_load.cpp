#include "apps/common/generate_load.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "actors/train/checkpoint_shards.hpp"
#include "base/check.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "model/moe/router.hpp"
#include "model/param_layout.hpp"
#include "storage/checkpoint_reader.hpp"

namespace troupe::apps {

namespace fs = std::filesystem;

namespace {

// generation_config.json's eos_token_id (an int or a list) in `dir`, if there is one.
std::vector<int64_t> generation_eos_ids(const fs::path& dir) {
  const fs::path path = dir / "generation_config.json";
  if (!fs::exists(path)) return {};
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL(path.string(), ": not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("eos_token_id") || j.at("eos_token_id").is_null()) return {};
  const nlohmann::json& e = j.at("eos_token_id");
  std::vector<int64_t> out;
  for (const nlohmann::json& id : e.is_array() ? e : nlohmann::json::array({e})) {
    TROUPE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, path.string(),
                 ": eos_token_id must be a non-negative integer or a list of them, got ", e.dump());
    out.push_back(id.get<int64_t>());
  }
  return out;
}

// The files of `dir`, and the end-of-sequence ids it names (besides `config_eos`).
void note_files(const fs::path& dir, const std::vector<int64_t>& config_eos, LoadedModel& m) {
  m.files = dir.string();
  std::vector<int64_t> ids = config_eos;
  for (int64_t id : generation_eos_ids(dir)) ids.push_back(id);
  for (int64_t id : ids) {
    TROUPE_CHECK(id < m.config.vocab_size, dir.string(), ": eos_token_id ", id, " is past the model's vocabulary (",
                 m.config.vocab_size, ")");
    if (std::find(m.eos_token_ids.begin(), m.eos_token_ids.end(), int32_t(id)) == m.eos_token_ids.end())
      m.eos_token_ids.push_back(int32_t(id));
  }
}

// Each MoE layer's expert bias from checkpoint `r` (f32 [E]); nothing without --moe-router-enable-expert-bias.
std::map<int, Tensor> read_expert_bias(const CheckpointReader& r, const GptConfig& c) {
  std::map<int, Tensor> out;
  if (!c.moe.enabled() || !c.moe.moe_router_enable_expert_bias) return out;
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    const std::string name = moe_expert_bias_name(l);
    TROUPE_CHECK(r.has(name), "--load ", r.dir(),
                 ": the model has --moe-router-enable-expert-bias but the checkpoint has no ", name,
                 " (saved before checkpoints kept the expert bias?); load a checkpoint that holds it");
    out.emplace(l, to_host_f32(Context::cpu(), r.expect(name, {c.moe.num_experts})));
  }
  return out;
}

}  // namespace

LoadedModel load_hf_model(const std::string& dir) {
  TROUPE_CHECK(fs::is_directory(dir), "--hf ", dir, ": no such directory");
  const HfCheckpoint ck = read_hf_checkpoint(dir);
  LoadedModel m;
  m.config = ck.config;
  TROUPE_CHECK(!m.config.moe.moe_router_enable_expert_bias, "--hf ", dir,
               ": the model's router has a learned expert bias (--moe-router-enable-expert-bias), which is not read "
               "from Hugging Face folders yet; generate from a Troupe checkpoint that holds it (--load)");
  m.weights = load_hf_weights(dir, ParamLayout(m.config, ChunkSpec::whole_model()), ck.arch);
  note_files(dir, ck.eos_token_ids, m);
  return m;
}

LoadedModel load_checkpoint_model(const std::string& dir, std::optional<int64_t> step) {
  TROUPE_CHECK(fs::is_directory(dir), "--load ", dir, ": no such directory");
  const CheckpointReader r = CheckpointReader::open(dir, step);
  LoadedModel m;
  m.config = gpt_config_from_json(r.metadata().model_config);
  // Global tensors by parameter name, whatever layout saved them (vocabulary padding rows zero).
  m.weights = actors::read_checkpoint_params(r, ParamLayout(m.config, ChunkSpec::whole_model()));
  m.expert_bias = read_expert_bias(r, m.config);
  note_files(r.dir(), {}, m);
  return m;
}

}  // namespace troupe::apps
