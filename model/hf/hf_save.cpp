// save_hf_checkpoint: one shard's tensors in memory at a time, each converted to the stored
// dtype (round to nearest even) with every value checked.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "kernels/half.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "model/hf/hf_tensor_files.hpp"
#include "storage/atomic_file.hpp"
#include "storage/safetensors.hpp"

namespace troupe {

namespace fs = std::filesystem;

namespace {

// config.json's torch_dtype for the dtype the tensors are stored in.
const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    default:
      TROUPE_FAIL("Hugging Face weights are stored as f32, bf16 or f16, not ", dtype_name(t));
  }
}

// `t` (host f32) in `dtype`. A value that is not finite, or that rounds to infinity in
// `dtype` (f16 above 65504), is an error: the file would hold a different model.
Tensor to_stored_dtype(const Tensor& t, DType dtype, const std::string& name) {
  const float* v = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    TROUPE_CHECK(std::isfinite(v[i]), "cannot export tensor '", name, "': its element ", i, " is ", v[i],
                 " (the checkpoint holds a weight that is not finite)");
  if (dtype == DType::f32) return t;
  Tensor out = Tensor::host(dtype, t.shape());
  auto* bits = out.data_as<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    bits[i] = dtype == DType::bf16 ? f32_to_bf16_bits(v[i]) : f32_to_f16_bits(v[i]);
    const float back = dtype == DType::bf16 ? bf16_bits_to_f32(bits[i]) : f16_bits_to_f32(bits[i]);
    TROUPE_CHECK(std::isfinite(back), "cannot export tensor '", name, "' as ", dtype_name(dtype), ": its element ", i,
                 " = ", v[i], " overflows it; export with --dtype bf16 or f32");
  }
  return out;
}

std::string shard_name(size_t i, size_t n) {
  if (n == 1) return kHfSafetensorsName;
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

void write_json(const fs::path& path, const nlohmann::json& j) {
  const std::string text = j.dump(2) + "\n";
  AtomicFile f(path.string());
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace

void save_hf_checkpoint(const std::string& dir, const ParamLayout& layout, HfArch arch, const Tensor& host,
                        const HfSaveOptions& options) {
  TROUPE_CHECK(!host.is_cuda() && host.dtype() == DType::f32 && host.numel() == layout.size(),
               "save_hf_checkpoint needs a host f32 buffer of ", layout.size(), " elements, got ", host.str());
  const char* torch_dtype = torch_dtype_name(options.dtype);
  TROUPE_CHECK(options.max_shard_bytes > 0, "save_hf_checkpoint: max_shard_bytes must be positive");
  // First: a model no HF family holds is refused before anything is written.
  nlohmann::json config = hf_config_from_gpt(layout.config(), arch);
  config["torch_dtype"] = torch_dtype;

  // Every HF tensor, then shards of at most max_shard_bytes (a larger tensor alone), in order.
  struct Item {
    const ParamInfo* param;
    HfPiece piece;
    uint64_t bytes;
  };
  std::vector<Item> items;
  for (const ParamInfo& p : layout.params())
    for (const HfPiece& piece : hf_pieces(layout.config(), arch, p.name))
      items.push_back({&p, piece, uint64_t(shape_numel(piece.hf_shape)) * dtype_size(options.dtype)});
  std::vector<std::vector<const Item*>> shards(1);
  uint64_t shard_bytes = 0;
  for (const Item& item : items) {
    if (!shards.back().empty() && shard_bytes + item.bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&item);
    shard_bytes += item.bytes;
  }

  fs::create_directories(dir);
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_bytes = 0;
  size_t done = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shard_name(s, shards.size());
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const Item* item : shards[s]) {
      const std::string& name = item->piece.hf_name;
      tensors.emplace_back(name,
                           to_stored_dtype(export_hf_piece(*item->param, item->piece, host), options.dtype, name));
      weight_map[name] = file;
      total_bytes += item->bytes;
      if (options.progress) options.progress(++done, items.size(), name);
    }
    write_safetensors((fs::path(dir) / file).string(), tensors, {{"format", "pt"}});
  }
  // The other layout's index or file would make the folder ambiguous (the reader refuses both).
  fs::remove(fs::path(dir) / (shards.size() == 1 ? kHfSafetensorsIndexName : kHfSafetensorsName));
  if (shards.size() > 1)
    write_json(fs::path(dir) / kHfSafetensorsIndexName,
               {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}});
  write_json(fs::path(dir) / "config.json", config);  // last: a folder without it is incomplete
}

}  // namespace troupe
