// The safetensors files of a Hugging Face checkpoint folder, checked before a weight is read:
// model.safetensors, or the shards model.safetensors.index.json names (every file it names
// exists, every tensor it names is in that file, and every tensor of those files is in it).
// Reading a tensor checks its shape, its dtype (F32, BF16 or F16) and that every value is
// finite; errors name the tensor and its file.
//
//   check_hf_weights_are_safetensors("llama-dir");   // refuses pytorch_model.bin, saying how to convert
//   HfTensorFiles files("llama-dir");
//   Tensor w = files.read("model.norm.weight", {C});  // host f32
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "storage/safetensors.hpp"

namespace troupe {

inline constexpr const char* kHfSafetensorsName = "model.safetensors";
inline constexpr const char* kHfSafetensorsIndexName = "model.safetensors.index.json";

// Throws unless `dir` holds its weights as safetensors (model.safetensors or an index, not
// both): a folder of pytorch_model.bin / *.bin shards / *.pt (pickles, which can run code when
// loaded) is refused with the command that converts it.
void check_hf_weights_are_safetensors(const std::string& dir);

// A JSON file of an HF folder (config.json, the shard index); errors name the file.
nlohmann::json read_hf_json(const std::string& path);

class HfTensorFiles {
 public:
  explicit HfTensorFiles(const std::string& dir);

  // Every tensor of every file, sorted.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  // The file holding `name` (as the error messages name it).
  const std::string& file_of(const std::string& name) const;
  // Host f32 copy after checking the shape, the dtype and that every value is finite.
  Tensor read(const std::string& name, const Shape& shape) const;

 private:
  const SafetensorsFile& file(const std::string& name) const;

  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;  // by file name
  std::map<std::string, const SafetensorsFile*> where_;            // tensor -> its file
};

}  // namespace troupe
