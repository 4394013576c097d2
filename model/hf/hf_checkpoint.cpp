#include "model/hf/hf_checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "base/log.hpp"
#include "storage/safetensors.hpp"

namespace troupe {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  TROUPE_CHECK(in.good(), "cannot open ", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL("malformed JSON in ", path.string(), ": ", e.what());
  }
}

// The safetensors files of a checkpoint folder and which file holds which tensor.
class HfTensorFiles {
 public:
  explicit HfTensorFiles(const fs::path& dir) {
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
      const nlohmann::json j = read_json(index);
      TROUPE_CHECK(j.contains("weight_map"), index.string(), " has no weight_map");
      for (const auto& [name, file] : j.at("weight_map").items()) {
        const std::string f = file.get<std::string>();
        if (!files_.count(f))
          files_.emplace(f, std::make_unique<SafetensorsFile>(SafetensorsFile::open((dir / f).string())));
        where_[name] = files_.at(f).get();
      }
    } else {
      const fs::path single = dir / "model.safetensors";
      TROUPE_CHECK(fs::exists(single), "no model.safetensors or model.safetensors.index.json in ", dir.string());
      files_.emplace("model.safetensors", std::make_unique<SafetensorsFile>(SafetensorsFile::open(single.string())));
      for (const auto& name : files_.begin()->second->names()) where_[name] = files_.begin()->second.get();
    }
  }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  Tensor expect(const std::string& name, const Shape& shape) const {
    auto it = where_.find(name);
    TROUPE_CHECK(it != where_.end(), "tensor '", name, "' is missing from the checkpoint");
    return it->second->expect(name, shape);
  }

 private:
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

}  // namespace

HfCheckpoint read_hf_checkpoint(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  const HfConfig hf = read_hf_config(read_json(path), path.string());
  for (const std::string& key : hf.unknown_keys)
    logger("hf").warning(path.string(), ": unknown key ", key, " (not read; check it changes nothing)");
  HfCheckpoint ck;
  ck.arch = hf.arch;
  ck.config = hf.model;
  ck.eos_token_ids = hf.eos_token_ids;
  ck.config.validate();
  return ck;
}

Tensor load_hf_weights(const std::string& dir, const ParamLayout& layout, HfArch arch) {
  HfTensorFiles files{fs::path(dir)};
  // GPT2LMHeadModel files prefix names with "transformer."; bare GPT2Model files do not.
  const std::string prefix = arch == HfArch::gpt2 && !files.has("transformer.wte.weight") ? "" : "transformer.";
  Tensor host = Tensor::host(DType::f32, {layout.size()});
  import_hf(
      layout, arch, [&](const std::string& name, const Shape& shape) { return files.expect(name, shape); }, host,
      prefix);
  return host;
}

void save_hf_checkpoint(const std::string& dir, const ParamLayout& layout, HfArch arch, const Tensor& host_f32) {
  fs::create_directories(dir);
  write_safetensors((fs::path(dir) / "model.safetensors").string(), export_hf(layout, arch, host_f32),
                    {{"format", "pt"}});
  const fs::path cfg = fs::path(dir) / "config.json";
  std::ofstream out(cfg);
  out << hf_config_from_gpt(layout.config(), arch).dump(2) << "\n";
  TROUPE_CHECK(out.good(), "cannot write ", cfg.string());
}

}  // namespace troupe
