#include "apps/common/generate_load.hpp"

#include <filesystem>

#include "actors/train/checkpoint_shards.hpp"
#include "base/check.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "model/param_layout.hpp"
#include "storage/checkpoint_reader.hpp"

namespace troupe::apps {

namespace fs = std::filesystem;

namespace {

// vocab.json and merges.txt in `dir`, when both are there.
void find_tokenizer_files(const std::string& dir, LoadedModel& m) {
  const fs::path vocab = fs::path(dir) / "vocab.json", merges = fs::path(dir) / "merges.txt";
  if (fs::exists(vocab) && fs::exists(merges)) {
    m.vocab_file = vocab.string();
    m.merge_file = merges.string();
  }
}

}  // namespace

LoadedModel load_hf_model(const std::string& dir) {
  TROUPE_CHECK(fs::is_directory(dir), "--hf ", dir, ": no such directory");
  const HfCheckpoint ck = read_hf_checkpoint(dir);
  LoadedModel m;
  m.config = ck.config;
  m.weights = load_hf_weights(dir, ParamLayout(m.config, ChunkSpec::whole_model()), ck.arch);
  find_tokenizer_files(dir, m);
  return m;
}

LoadedModel load_checkpoint_model(const std::string& dir) {
  TROUPE_CHECK(fs::is_directory(dir), "--load ", dir, ": no such directory");
  const CheckpointReader r = CheckpointReader::open(dir);
  LoadedModel m;
  m.config = gpt_config_from_json(r.metadata().model_config);
  // Global tensors by parameter name, whatever layout saved them (vocabulary padding rows zero).
  m.weights = actors::read_checkpoint_params(dir, ParamLayout(m.config, ChunkSpec::whole_model()));
  find_tokenizer_files(r.dir(), m);
  return m;
}

}  // namespace troupe::apps
