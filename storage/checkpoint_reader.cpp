#include "storage/checkpoint_reader.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/check.hpp"
#include "storage/checkpoint_catalog.hpp"
#include "storage/checkpoint_writer.hpp"
#include "storage/shard_geometry.hpp"

namespace troupe {

namespace fs = std::filesystem;

CheckpointReader CheckpointReader::open(const std::string& root_dir, std::optional<int64_t> iteration) {
  const int64_t it = resolve_checkpoint_iteration(root_dir, iteration);
  try {
    const fs::path dir = fs::path(root_dir) / checkpoint_iteration_dir_name(it);
    TROUPE_CHECK(iteration || fs::exists(dir / kCheckpointMetadataName), "checkpoint tracker '",
                 (fs::path(root_dir) / kCheckpointTrackerName).string(), "' names iteration ", it, " but '",
                 (dir / kCheckpointMetadataName).string(), "' does not exist (dangling tracker)");
    return open_iteration(root_dir, it);
  } catch (const Error& e) {
    // What the user can load instead: the newest checkpoint that passes these same checks.
    throw Error(str_cat("cannot load iteration ", it, " of '", root_dir, "' (", intact_checkpoint_hint(root_dir, it),
                        "): ", e.what()));
  }
}

CheckpointReader CheckpointReader::open_iteration(const std::string& root_dir, int64_t iteration) {
  CheckpointReader r;
  r.root_ = root_dir;
  r.dir_ = (fs::path(root_dir) / checkpoint_iteration_dir_name(iteration)).string();
  r.meta_path_ = (fs::path(r.dir_) / kCheckpointMetadataName).string();
  const std::string& mp = r.meta_path_;
  TROUPE_CHECK(fs::is_directory(r.dir_), "no checkpoint directory '", r.dir_, "'");
  TROUPE_CHECK(fs::exists(mp), "checkpoint '", r.dir_, "' is incomplete: no ", kCheckpointMetadataName,
               " (a save that did not finish)");

  nlohmann::json j;
  try {
    std::ifstream in(mp);
    TROUPE_CHECK(in.good(), "cannot read '", mp, "'");
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL("'", mp, "' is not valid JSON: ", e.what());
  }
  try {
    TROUPE_CHECK(j.value("format", std::string()) == kCheckpointFormatName, "'", mp, "' is not a ",
                 kCheckpointFormatName, " metadata file");
    const int version = j.at("version").get<int>();
    TROUPE_CHECK(version == kCheckpointFormatVersion, "'", mp, "' has format version ", version,
                 "; this build reads version ", kCheckpointFormatVersion);
    TROUPE_CHECK(j.at("checksum").get<std::string>() == "xxh64", "'", mp, "': unknown checksum '",
                 j.at("checksum").get<std::string>(), "'");
    r.meta_.iteration = j.at("iteration").get<int64_t>();
    TROUPE_CHECK(r.meta_.iteration == iteration, "'", mp, "' records iteration ", r.meta_.iteration, ", expected ",
                 iteration);
    r.meta_.consumed_samples = j.at("consumed_samples").get<int64_t>();
    r.meta_.model_config = j.at("model_config");
    r.meta_.parallel_layout = j.at("parallel_layout");
    r.meta_.rng_state = j.at("rng_state");
    r.meta_.training_state = j.value("training_state", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL("'", mp, "': malformed metadata: ", e.what());
  }

  // Shard files: present, and exactly the recorded size (a truncated copy is caught here).
  std::map<std::string, uint64_t> file_bytes;
  try {
    for (const auto& [name, jf] : j.at("files").items()) file_bytes[name] = jf.at("bytes").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL("'", mp, "': malformed \"files\": ", e.what());
  }
  for (const auto& [name, bytes] : file_bytes) {
    const fs::path p = fs::path(r.dir_) / name;
    TROUPE_CHECK(fs::exists(p), "checkpoint shard file '", p.string(), "' is missing (listed in '", mp, "')");
    const uint64_t size = fs::file_size(p);
    TROUPE_CHECK(size == bytes, "checkpoint shard file '", p.string(), "' has ", size, " bytes, '", mp, "' records ",
                 bytes, " (truncated or overwritten)");
    r.files_.emplace(name, MappedFile::open(p.string()));
  }

  if (!j.contains("tensors") || !j["tensors"].is_object()) TROUPE_FAIL("'", mp, "': no \"tensors\" index");
  for (const auto& [name, jt] : j["tensors"].items()) {
    TensorRecord t = tensor_record_from_json(name, jt, mp);
    for (const ShardRecord& s : t.shards) {
      auto f = file_bytes.find(s.file);
      TROUPE_CHECK(f != file_bytes.end(), "tensor '", name, "' in '", mp, "': shard file '", s.file,
                   "' is not listed in \"files\"");
      TROUPE_CHECK(s.byte_offset + s.byte_length <= f->second, "tensor '", name, "': shard ", s.slice.str(),
                   " ends at byte ", s.byte_offset + s.byte_length, " past the end of '",
                   (fs::path(r.dir_) / s.file).string(), "' (", f->second, " bytes)");
    }
    r.tensors_.emplace(name, std::move(t));
  }
  return r;
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

const TensorRecord& CheckpointReader::info(const std::string& name) const {
  auto it = tensors_.find(name);
  TROUPE_CHECK(it != tensors_.end(), "no tensor '", name, "' in checkpoint '", meta_path_, "'");
  return it->second;
}

const uint8_t* CheckpointReader::shard_bytes(const TensorRecord& t, const ShardRecord& s) const {
  const MappedFile& f = files_.at(s.file);
  const uint8_t* p = f.data() ? f.data() + s.byte_offset : nullptr;
  const std::string key = str_cat(s.file, "@", s.byte_offset);
  std::lock_guard lock(*verified_mu_);
  if (!verified_.count(key)) {
    const uint64_t h = xxh64(p, size_t(s.byte_length));
    TROUPE_CHECK(h == s.checksum, "checksum mismatch in checkpoint shard file '", f.path(), "', tensor '", t.name,
                 "' slice ", s.slice.str(), " (bytes ", s.byte_offset, "..", s.byte_offset + s.byte_length, "): xxh64 ",
                 checksum_hex(h), ", metadata records ", checksum_hex(s.checksum), " (corrupted); ",
                 intact_checkpoint_hint(root_, meta_.iteration));
    verified_[key] = true;
  }
  return p;
}

Tensor CheckpointReader::read(const std::string& name) const {
  return read_box(name, ShardSlice::whole(info(name).shape));
}

Tensor CheckpointReader::expect(const std::string& name, const Shape& shape) const {
  const TensorRecord& t = info(name);
  TROUPE_CHECK(t.shape == shape, "tensor '", name, "' in checkpoint '", meta_path_, "' has shape ", shape_str(t.shape),
               ", expected ", shape_str(shape));
  return read(name);
}

Tensor CheckpointReader::read_slice(const std::string& name, int64_t row_begin, int64_t row_end) const {
  const TensorRecord& t = info(name);
  TROUPE_CHECK(!t.shape.empty(), "tensor '", name, "' in '", meta_path_, "' is 0-d: no rows to slice");
  TROUPE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= t.shape[0], "tensor '", name, "' in '", meta_path_,
               "': rows [", row_begin, ", ", row_end, ") outside shape ", shape_str(t.shape));
  return read_box(name, ShardSlice::rows(t.shape, row_begin, row_end));
}

Tensor CheckpointReader::read_box(const std::string& name, const ShardSlice& box) const {
  const TensorRecord& t = info(name);
  validate_slice(t.shape, box, str_cat("tensor '", name, "' in '", meta_path_, "'"));
  Tensor out = Tensor::host(t.dtype, box.length);
  const size_t es = dtype_size(t.dtype);
  const size_t nd = t.shape.size();
  uint8_t* dst = static_cast<uint8_t*>(out.data());

  for (const ShardRecord& s : t.shards) {
    // The part of this shard inside the box.
    ShardSlice region{Shape(nd), Shape(nd)};
    bool empty = false;
    for (size_t d = 0; d < nd; ++d) {
      region.offset[d] = std::max(box.offset[d], s.slice.offset[d]);
      region.length[d] =
          std::min(box.offset[d] + box.length[d], s.slice.offset[d] + s.slice.length[d]) - region.offset[d];
      empty = empty || region.length[d] <= 0;
    }
    if (empty || s.slice.numel() == 0) continue;
    copy_box_region(shard_bytes(t, s), s.slice, dst, box, region, es);
  }
  return out;
}

}  // namespace troupe
