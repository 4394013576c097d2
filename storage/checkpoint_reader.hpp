// Reads a checkpoint directory written by CheckpointWriter (format:
// storage/checkpoint_format.hpp). Opening validates everything but the data bytes: the
// tracker, metadata.json (format, version, iteration), that every shard file exists with
// the recorded size and that each tensor's shards tile its shape. Each shard's XXH64 is
// verified the first time its bytes are used. Reads assemble global tensors, or any row
// range of one, from however the shards were cut, so a checkpoint saved under one
// TP/PP/DP layout loads into another.
//
//   CheckpointReader r = CheckpointReader::open("ckpt");            // the tracker's iteration
//   CheckpointReader r4 = CheckpointReader::open("ckpt", 4);        // --ckpt-step 4
//   Tensor wte = r.expect("wte", {V, C});                            // whole, in its stored dtype
//   Tensor mine = r.read_slice("wte", rank * V / 3, (rank + 1) * V / 3);
//
// Every error is a troupe::Error naming the file and, where there is one, the tensor; one that
// makes the checkpoint unusable also names the newest other intact checkpoint of the directory
// and the --ckpt-step that loads it (storage/checkpoint_catalog.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "storage/checkpoint_format.hpp"
#include "storage/mapped_file.hpp"

namespace troupe {

class CheckpointReader {
 public:
  // Iteration `iteration` of `root_dir` (--ckpt-step), tracker or not, or without one the
  // checkpoint the tracker names. Throws on a missing tracker, on a dangling one (its directory
  // missing or without metadata.json), on an iteration `root_dir` does not hold (listing those
  // it does), and on an incomplete (no metadata.json) or broken checkpoint, naming the newest
  // other intact one and the --ckpt-step that loads it.
  static CheckpointReader open(const std::string& root_dir, std::optional<int64_t> iteration = std::nullopt);
  // The checks of open() for one iteration, its errors without what to load instead.
  static CheckpointReader open_iteration(const std::string& root_dir, int64_t iteration);

  const std::string& dir() const { return dir_; }
  const CheckpointMetadata& metadata() const { return meta_; }
  int64_t iteration() const { return meta_.iteration; }

  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws naming the tensor and metadata.json when there is no such tensor.
  const TensorRecord& info(const std::string& name) const;

  // The whole global tensor, host, in its stored dtype (exact bytes).
  Tensor read(const std::string& name) const;
  // read() after checking the global shape; the error names the tensor and both shapes.
  Tensor expect(const std::string& name, const Shape& shape) const;
  // Rows [row_begin, row_end) of the global tensor (every other dimension whole), from
  // whichever shards hold them.
  Tensor read_slice(const std::string& name, int64_t row_begin, int64_t row_end) const;
  // Any box of the global tensor.
  Tensor read_box(const std::string& name, const ShardSlice& box) const;

 private:
  CheckpointReader() = default;
  const uint8_t* shard_bytes(const TensorRecord& t, const ShardRecord& s) const;

  std::string root_;  // the directory of iteration directories
  std::string dir_;
  std::string meta_path_;
  CheckpointMetadata meta_;
  std::map<std::string, TensorRecord> tensors_;
  std::map<std::string, MappedFile> files_;  // file name -> mapping
  // Shards whose checksum has been verified ("file@offset"); reads may come from threads.
  std::unique_ptr<std::mutex> verified_mu_ = std::make_unique<std::mutex>();
  mutable std::map<std::string, bool> verified_;
};

}  // namespace troupe
