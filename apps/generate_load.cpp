#include "apps/generate_load.hpp"

#include <algorithm>
#include <filesystem>

#include "kernels/check.hpp"
#include "model/hf_checkpoint.hpp"
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

// Reads each parameter by its global name. The word embedding and output layer may be saved
// with fewer rows than our padded vocabulary (unpadded [vocab_size, hidden]): the padding rows,
// which no token reaches, stay zero.
LoadedModel load_checkpoint_model(const std::string& dir) {
  TROUPE_CHECK(fs::is_directory(dir), "--load ", dir, ": no such directory");
  const CheckpointReader r = CheckpointReader::open(dir);
  LoadedModel m;
  m.config = gpt_config_from_json(r.metadata().model_config);
  const ParamLayout layout(m.config, ChunkSpec::whole_model());
  m.weights = Tensor::host(DType::f32, {layout.size()});
  fill_zero(Context::cpu(), m.weights);
  for (const ParamInfo& p : layout.params()) {
    const TensorRecord& t = r.info(p.name);
    TROUPE_CHECK(t.dtype == DType::f32, "checkpoint ", r.dir(), ": tensor '", p.name, "' is ", dtype_name(t.dtype),
                 ", expected f32");
    TROUPE_CHECK(t.shape.size() == p.shape.size() && t.shape[0] <= p.shape[0] &&
                     std::equal(t.shape.begin() + 1, t.shape.end(), p.shape.begin() + 1),
                 "checkpoint ", r.dir(), ": tensor '", p.name, "' is ", shape_str(t.shape), ", the model expects ",
                 shape_str(p.shape));
    const Tensor rows = r.read_slice(p.name, 0, t.shape[0]);
    std::copy_n(rows.data_as<float>(), rows.numel(), m.weights.data_as<float>() + p.offset);
  }
  find_tokenizer_files(r.dir(), m);
  return m;
}

}  // namespace troupe::apps
