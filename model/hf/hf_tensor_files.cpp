#include "model/hf/hf_tensor_files.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/check.hpp"

namespace troupe {

namespace fs = std::filesystem;

nlohmann::json read_hf_json(const std::string& path) {
  std::ifstream in(path);
  TROUPE_CHECK(in.good(), "cannot open ", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL("malformed JSON in ", path, ": ", e.what());
  }
}

namespace {

// Weight files of other formats than safetensors, which transformers reads and Troupe does not.
bool is_other_weight_file(const fs::path& p) {
  static const char* const kExtensions[] = {".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack"};
  const std::string ext = p.extension().string();
  return std::any_of(std::begin(kExtensions), std::end(kExtensions), [&](const char* e) { return ext == e; }) ||
         p.filename() == "pytorch_model.bin.index.json";
}

// "[3, 7]" for flat element `i` of a tensor of `shape`.
std::string index_str(const Shape& shape, int64_t i) {
  Shape at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = i % shape[d];
    i /= shape[d];
  }
  return shape_str(at);
}

}  // namespace

void check_hf_weights_are_safetensors(const std::string& dir) {
  const bool single = fs::exists(fs::path(dir) / kHfSafetensorsName);
  const bool index = fs::exists(fs::path(dir) / kHfSafetensorsIndexName);
  TROUPE_CHECK(!(single && index), "'", dir, "' holds both ", kHfSafetensorsName, " and ", kHfSafetensorsIndexName,
               ", and Troupe cannot tell which holds the model (transformers reads ", kHfSafetensorsName,
               "); remove the stale one");
  if (single || index) return;
  std::vector<std::string> others;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (is_other_weight_file(entry.path())) others.push_back(entry.path().filename().string());
  std::sort(others.begin(), others.end());
  if (others.empty()) TROUPE_FAIL("no ", kHfSafetensorsName, " or ", kHfSafetensorsIndexName, " in '", dir, "'");
  std::string listed;
  for (size_t i = 0; i < others.size() && i < 3; ++i) listed += str_cat(i ? ", " : "", others[i]);
  if (others.size() > 3) listed += str_cat(" and ", others.size() - 3, " more");
  TROUPE_FAIL("'", dir, "' holds its weights as ", listed,
              " (PyTorch pickles or another framework's format), not safetensors, which is all Troupe reads "
              "(loading a pickle can run code); convert the folder first with transformers: python -c \"import "
              "transformers as t; t.AutoModelForCausalLM.from_pretrained('",
              dir,
              "', torch_dtype='auto').save_pretrained('OUT', safe_serialization=True); "
              "t.AutoTokenizer.from_pretrained('",
              dir, "').save_pretrained('OUT')\", then give OUT");
}

HfTensorFiles::HfTensorFiles(const std::string& dir) {
  check_hf_weights_are_safetensors(dir);
  const fs::path index = fs::path(dir) / kHfSafetensorsIndexName;
  if (!fs::exists(index)) {
    const fs::path single = fs::path(dir) / kHfSafetensorsName;
    auto f = std::make_unique<SafetensorsFile>(SafetensorsFile::open(single.string()));
    for (const std::string& name : f->names()) where_[name] = f.get();
    files_.emplace(kHfSafetensorsName, std::move(f));
    return;
  }
  // A sharded checkpoint: the index and the files must agree exactly, or which tensor is the
  // model's would depend on the reader.
  const nlohmann::json j = read_hf_json(index.string());
  TROUPE_CHECK(
      j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object() && !j.at("weight_map").empty(),
      index.string(), ": needs a non-empty object \"weight_map\" {tensor name: file name}");
  for (const auto& [name, file] : j.at("weight_map").items()) {
    TROUPE_CHECK(file.is_string(), index.string(), ": the file of tensor '", name, "' must be a string, got ",
                 file.dump());
    const std::string f = file.get<std::string>();
    TROUPE_CHECK(!f.empty() && f != "." && f != ".." && fs::path(f).filename().string() == f, index.string(),
                 ": tensor '", name, "' is in \"", f, "\", which is not the name of a file beside the index");
    if (!files_.count(f)) {
      const fs::path path = fs::path(dir) / f;
      TROUPE_CHECK(fs::is_regular_file(path), index.string(), " puts tensor '", name, "' in ", f,
                   ", which does not exist in '", dir, "' (an incomplete download?)");
      files_.emplace(f, std::make_unique<SafetensorsFile>(SafetensorsFile::open(path.string())));
    }
    const SafetensorsFile* shard = files_.at(f).get();
    TROUPE_CHECK(shard->has(name), index.string(), " puts tensor '", name, "' in ", shard->path(),
                 ", which does not hold it");
    where_[name] = shard;
  }
  for (const auto& [f, shard] : files_)
    for (const std::string& name : shard->names()) {
      const auto it = where_.find(name);
      TROUPE_CHECK(it != where_.end(), shard->path(), " holds tensor '", name, "', which ", index.string(),
                   " does not list");
      TROUPE_CHECK(it->second == shard.get(), shard->path(), " holds tensor '", name, "', which ", index.string(),
                   " puts in ", it->second->path(), " (a tensor in two files)");
    }
}

std::vector<std::string> HfTensorFiles::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, f] : where_) out.push_back(name);
  return out;
}

const SafetensorsFile& HfTensorFiles::file(const std::string& name) const {
  const auto it = where_.find(name);
  TROUPE_CHECK(it != where_.end(), "tensor '", name, "' is missing from the checkpoint (",
               files_.begin()->second->path(), files_.size() > 1 ? " and the other files of its index" : "", ")");
  return *it->second;
}

const std::string& HfTensorFiles::file_of(const std::string& name) const { return file(name).path(); }

Tensor HfTensorFiles::read(const std::string& name, const Shape& shape) const {
  const SafetensorsFile& f = file(name);
  const SafetensorsTensorInfo& info = f.info(name);
  TROUPE_CHECK(info.dtype == DType::f32 || info.dtype == DType::bf16 || info.dtype == DType::f16, "safetensors file '",
               f.path(), "', tensor '", name, "': dtype ", info.dtype_name,
               " is not a weight dtype Troupe reads (F32, BF16, F16)");
  Tensor t = f.expect(name, shape);
  const float* v = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(v[i]))
      TROUPE_FAIL("safetensors file '", f.path(), "', tensor '", name, "': the value at index ", index_str(shape, i),
                  " is ", v[i], "; a weight that is not finite makes every output meaningless");
  return t;
}

}  // namespace troupe
