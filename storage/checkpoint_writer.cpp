#include "storage/checkpoint_writer.hpp"

#include "storage/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <vector>

#include "base/check.hpp"
#include "storage/checkpoint_catalog.hpp"

namespace troupe {

namespace fs = std::filesystem;

struct CheckpointWriter::ShardFile {
  std::mutex mu;
  std::string name;  // relative to the iteration directory
  std::string path;
  int fd = -1;
  uint64_t size = 0;

  ~ShardFile() {
    if (fd >= 0) ::close(fd);
  }

  void write_all(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t k = ::write(fd, p, n);
      if (k < 0 && errno == EINTR) continue;
      TROUPE_SYSCALL(k, "cannot write checkpoint shard '", path, "'");
      p += k;
      n -= size_t(k);
      size += uint64_t(k);
    }
  }

  void pad_to_alignment() {
    static const char zeros[kShardAlignment] = {};
    const size_t pad = size_t((kShardAlignment - size % kShardAlignment) % kShardAlignment);
    if (pad) write_all(zeros, pad);
  }

  void sync_and_close() {
    if (fd < 0) return;
    TROUPE_SYSCALL(::fsync(fd), "cannot fsync checkpoint shard '", path, "'");
    const int f = fd;
    fd = -1;
    TROUPE_SYSCALL(::close(f), "cannot close checkpoint shard '", path, "'");
  }
};

CheckpointWriter::CheckpointWriter(std::string root_dir, int64_t iteration)
    : root_(std::move(root_dir)), iteration_(iteration) {
  dir_ = (fs::path(root_) / checkpoint_iteration_dir_name(iteration)).string();
  const fs::path meta = fs::path(dir_) / kCheckpointMetadataName;
  if (fs::exists(meta)) {
    int64_t latest = -1;
    if (fs::exists(fs::path(root_) / kCheckpointTrackerName)) latest = read_checkpoint_tracker(root_);
    TROUPE_CHECK(latest != iteration, "checkpoint '", dir_, "' already exists and is the latest (",
                 kCheckpointTrackerName, " names it); refusing to overwrite it");
    // A complete checkpoint the tracker never pointed at (a crash before the tracker update):
    // no longer complete from here on; this save replaces it.
    std::error_code ec;
    fs::remove(meta, ec);
    TROUPE_CHECK(!ec || ec == std::errc::no_such_file_or_directory, "cannot remove '", meta.string(),
                 "': ", ec.message());
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  TROUPE_CHECK(!ec, "cannot create checkpoint directory '", dir_, "': ", ec.message());
  fsync_directory(root_);
}

CheckpointWriter::~CheckpointWriter() = default;

CheckpointWriter::ShardFile& CheckpointWriter::shard_file(int writer_id) {
  std::lock_guard lock(mu_);
  TROUPE_CHECK(!committed_, "checkpoint '", dir_, "': add_shard after commit");
  auto& slot = files_[writer_id];
  if (!slot) {
    auto f = std::make_unique<ShardFile>();
    f->name = checkpoint_shard_file_name(writer_id);
    f->path = (fs::path(dir_) / f->name).string();
    f->fd = ::open(f->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    TROUPE_SYSCALL(f->fd, "cannot create checkpoint shard '", f->path, "'");
    slot = std::move(f);
  }
  return *slot;
}

void CheckpointWriter::add_shard(int writer_id, const std::string& name, const Shape& global_shape,
                                 const ShardSlice& slice, const Tensor& data) {
  const std::string what = str_cat("checkpoint '", dir_, "', tensor '", name, "'");
  TROUPE_CHECK(!name.empty(), "checkpoint '", dir_, "': empty tensor name");
  TROUPE_CHECK(data.defined() && data.device() == DeviceKind::cpu, what, ": needs a host tensor, got ",
               data.defined() ? data.str() : std::string("undefined"));
  validate_slice(global_shape, slice, what);
  TROUPE_CHECK(data.numel() == slice.numel(), what, ": data ", data.str(), " does not fill slice ", slice.str());

  ShardFile& file = shard_file(writer_id);
  {
    // Register the tensor first so that a conflicting shape or dtype fails before writing.
    std::lock_guard lock(mu_);
    auto [it, inserted] = tensors_.try_emplace(name);
    TensorRecord& t = it->second;
    if (inserted) {
      t.name = name;
      t.dtype = data.dtype();
      t.shape = global_shape;
    } else {
      TROUPE_CHECK(t.shape == global_shape, what, ": global shape ", shape_str(global_shape),
                   " differs from the earlier shard's ", shape_str(t.shape));
      TROUPE_CHECK(t.dtype == data.dtype(), what, ": dtype ", dtype_name(data.dtype()),
                   " differs from the earlier shard's ", dtype_name(t.dtype));
    }
  }

  ShardRecord rec;
  rec.slice = slice;
  rec.file = file.name;
  rec.byte_length = data.nbytes();
  rec.checksum = xxh64(data.data(), data.nbytes());
  {
    std::lock_guard lock(file.mu);
    TROUPE_CHECK(file.fd >= 0, what, ": shard file '", file.path, "' already closed");
    file.pad_to_alignment();
    rec.byte_offset = file.size;
    file.write_all(data.data(), data.nbytes());
  }
  std::lock_guard lock(mu_);
  tensors_[name].shards.push_back(std::move(rec));
}

void CheckpointWriter::add_rows(int writer_id, const std::string& name, const Shape& global_shape, int64_t row_begin,
                                const Tensor& data) {
  TROUPE_CHECK(data.ndim() >= 1, "checkpoint '", dir_, "', tensor '", name, "': add_rows of a 0-d tensor");
  add_shard(writer_id, name, global_shape, ShardSlice::rows(global_shape, row_begin, row_begin + data.dim(0)), data);
}

std::string CheckpointWriter::finish() {
  std::lock_guard lock(mu_);
  TROUPE_CHECK(!committed_, "checkpoint '", dir_, "' finished twice");
  nlohmann::json files = nlohmann::json::object();
  for (auto& [id, f] : files_) {
    std::lock_guard flock(f->mu);
    f->sync_and_close();
    files[f->name] = {{"bytes", f->size}};
  }
  fsync_directory(dir_);
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, t] : tensors_) tensors[name] = tensor_record_to_json(t);
  committed_ = true;
  return nlohmann::json{{"files", std::move(files)}, {"tensors", std::move(tensors)}}.dump();
}

std::string CheckpointWriter::commit(const CheckpointMetadata& meta) {
  TROUPE_CHECK(meta.iteration == iteration_, "checkpoint '", dir_, "': metadata iteration ", meta.iteration,
               " differs from the writer's ", iteration_);
  return commit_checkpoint(root_, meta, {finish()});
}

std::string commit_checkpoint(const std::string& root_dir, const CheckpointMetadata& meta,
                              const std::vector<std::string>& indices) {
  std::string dir = (fs::path(root_dir) / checkpoint_iteration_dir_name(meta.iteration)).string();
  const std::string meta_path = (fs::path(dir) / kCheckpointMetadataName).string();

  // 1. The writers' indices merged (their shard files are durable already).
  nlohmann::json files = nlohmann::json::object();
  std::map<std::string, TensorRecord> merged;
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::string where = str_cat("the index of checkpoint writer ", i, " for '", dir, "'");
    nlohmann::json part;
    try {
      part = nlohmann::json::parse(indices[i]);
      for (const auto& [name, jf] : part.at("files").items()) {
        TROUPE_CHECK(!files.contains(name), where, ": shard file '", name, "' written by two writers");
        files[name] = jf;
      }
    } catch (const nlohmann::json::exception& e) {
      TROUPE_FAIL(where, " is malformed: ", e.what());
    }
    for (const auto& [name, jt] : part["tensors"].items()) {
      TensorRecord t = tensor_record_from_json(name, jt, where, /*validate=*/false);
      auto [it, fresh] = merged.try_emplace(name, t);
      if (fresh) continue;
      TROUPE_CHECK(it->second.shape == t.shape && it->second.dtype == t.dtype, "tensor '", name, "' in '", dir,
                   "': writers disagree on its shape or dtype (", shape_str(it->second.shape), " ",
                   dtype_name(it->second.dtype), " vs ", shape_str(t.shape), " ", dtype_name(t.dtype), ")");
      for (ShardRecord& s : t.shards) it->second.shards.push_back(std::move(s));
    }
  }

  // 2. Checked, then metadata.json (its appearance marks the checkpoint complete).
  nlohmann::json tensors = nlohmann::json::object();
  for (auto& [name, t] : merged) {
    // Shards arrive in whatever order the writers ran: store them by position so the same
    // checkpoint always has the same metadata.json.
    std::sort(t.shards.begin(), t.shards.end(),
              [](const ShardRecord& a, const ShardRecord& b) { return a.slice.offset < b.slice.offset; });
    validate_tensor_record(t, meta_path);
    tensors[name] = tensor_record_to_json(t);
  }
  nlohmann::json j = {{"format", kCheckpointFormatName},
                      {"version", kCheckpointFormatVersion},
                      {"checksum", "xxh64"},
                      {"iteration", meta.iteration},
                      {"consumed_samples", meta.consumed_samples},
                      {"model_config", meta.model_config},
                      {"parallel_layout", meta.parallel_layout},
                      {"rng_state", meta.rng_state},
                      {"training_state", meta.training_state},
                      {"files", files},
                      {"tensors", std::move(tensors)}};
  const std::string meta_json = j.dump(1) + "\n";
  write_file_atomic(meta_path, meta_json.data(), meta_json.size());

  // 3. Shard files of an earlier, crashed save under another layout are not part of it.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard_", 0) == 0 && !files.contains(name)) {
      std::error_code ec;
      fs::remove(entry.path(), ec);
      TROUPE_CHECK(!ec, "cannot remove stale shard file '", entry.path().string(), "': ", ec.message());
    }
  }

  // 4. Only now the tracker (Megatron writes the bare number).
  const std::string tracker = str_cat(meta.iteration, "\n");
  write_file_atomic((fs::path(root_dir) / kCheckpointTrackerName).string(), tracker.data(), tracker.size());
  return dir;
}

void prune_checkpoints(const std::string& root_dir, int keep) {
  TROUPE_CHECK(keep >= 1, "prune_checkpoints: keep must be >= 1, got ", keep);
  const int64_t latest = read_checkpoint_tracker(root_dir);
  std::vector<std::pair<int64_t, fs::path>> complete, incomplete;
  for (int64_t it : checkpoint_iterations(root_dir)) {
    // Those after the tracker's are not this run's line (a crash's leftover, or what an
    // --overwrite rewind left): the saves that reach them replace them; never counted or removed.
    if (it > latest) continue;
    const fs::path path = fs::path(root_dir) / checkpoint_iteration_dir_name(it);
    (checkpoint_complete(root_dir, it) ? complete : incomplete).emplace_back(it, path);
  }
  std::sort(complete.begin(), complete.end(), std::greater<>());
  std::vector<fs::path> doomed;
  for (size_t i = size_t(keep); i < complete.size(); ++i)
    if (complete[i].first != latest) doomed.push_back(complete[i].second);
  for (const auto& [it, path] : incomplete)
    if (it < latest) doomed.push_back(path);
  for (const fs::path& path : doomed) {
    // metadata.json first: a crash halfway leaves an incomplete directory, never a damaged
    // "complete" one.
    std::error_code ec;
    fs::remove(path / kCheckpointMetadataName, ec);
    fsync_directory(path.string());
    fs::remove_all(path, ec);
    TROUPE_CHECK(!ec, "cannot remove old checkpoint '", path.string(), "': ", ec.message());
  }
  if (!doomed.empty()) fsync_directory(root_dir);
}

int64_t read_checkpoint_tracker(const std::string& root_dir) {
  const std::string path = (fs::path(root_dir) / kCheckpointTrackerName).string();
  std::ifstream in(path);
  TROUPE_CHECK(in.good(), "no checkpoint tracker '", path, "' (no complete checkpoint was saved in '", root_dir, "')");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  TROUPE_CHECK(!text.empty() && text.find_first_not_of("0123456789") == std::string::npos, "checkpoint tracker '", path,
               "' does not hold an iteration number: '", text, "'");
  return std::stoll(text);
}

}  // namespace troupe
