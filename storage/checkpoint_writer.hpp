// Writes one checkpoint directory (format: storage/checkpoint_format.hpp). Each writer id
// owns one shard file, so writers on different threads append without waiting on each
// other; commit() makes every shard durable, writes metadata.json, then points the tracker
// at this iteration. Until commit() returns, the previous checkpoint stays the latest.
//
//   CheckpointWriter w("ckpt", 100);
//   // on writer thread r (tensors sharded by rows):
//   w.add_shard(r, "wte", {V, C}, ShardSlice::rows({V, C}, r * V / 2, (r + 1) * V / 2), wte_part);
//   // once every writer has finished:
//   w.commit({.iteration = 100, .consumed_samples = 51200, .model_config = cfg});
//
// Several processes write one checkpoint together: each has its own CheckpointWriter (writer
// ids unique across processes), calls finish() once its shards are written, and one process,
// once it has every process's finish() index, calls commit_checkpoint() with all of them.
//
// Shard files left in the directory by a crashed save are overwritten or, if no longer part
// of the checkpoint, removed on commit. A complete checkpoint that the tracker names is never
// overwritten: the constructor throws. One the tracker does not name (a crash between its
// metadata.json and the tracker) is replaced.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "storage/checkpoint_format.hpp"

namespace troupe {

class CheckpointWriter {
 public:
  CheckpointWriter(std::string root_dir, int64_t iteration);
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  // Without commit(): shard files are closed and left behind, as after a crash; the
  // directory is never picked up (no metadata.json) and the next save clears it.
  ~CheckpointWriter();

  // Appends the host tensor `data` (numel == slice.numel(), row-major slice of the global
  // tensor) to writer `writer_id`'s shard file. Thread-safe; calls for one writer id are
  // serialized. The name's global shape and dtype must agree across calls.
  void add_shard(int writer_id, const std::string& name, const Shape& global_shape, const ShardSlice& slice,
                 const Tensor& data);
  // add_shard for rows [row_begin, row_begin + data.dim(0)) of the global tensor.
  void add_rows(int writer_id, const std::string& name, const Shape& global_shape, int64_t row_begin,
                const Tensor& data);

  // fsyncs and closes every shard file, checks that each tensor's shards tile its shape,
  // writes metadata.json durably, then replaces the tracker durably. `meta.iteration` must
  // equal the writer's. Returns the checkpoint directory. Call once, after all add_shard.
  std::string commit(const CheckpointMetadata& meta);

  // fsyncs and closes this writer's shard files; returns its part of the index (the files
  // and the shards it wrote, as JSON text) for commit_checkpoint. Call once, after all add_shard.
  std::string finish();

  const std::string& dir() const { return dir_; }
  int64_t iteration() const { return iteration_; }

 private:
  struct ShardFile;
  ShardFile& shard_file(int writer_id);

  std::string root_;
  std::string dir_;
  int64_t iteration_;
  bool committed_ = false;
  std::mutex mu_;                                    // guards files_ and tensors_
  std::map<int, std::unique_ptr<ShardFile>> files_;  // writer id -> its file
  std::map<std::string, TensorRecord> tensors_;      // name -> index entry
};

// Merges the finish() indices of every writer of iteration `meta.iteration` in `root_dir`,
// checks that each tensor's shards tile its shape, writes metadata.json durably, removes
// shard files no index names (an earlier crashed save's), then replaces the tracker durably.
// Returns the checkpoint directory.
std::string commit_checkpoint(const std::string& root_dir, const CheckpointMetadata& meta,
                              const std::vector<std::string>& indices);

// Retention (--most-recent-k): of the checkpoints up to the tracker's, keeps the newest `keep`
// complete ones and removes the older ones and the incomplete ones. Those after the tracker's
// (a crash between metadata.json and the tracker, or an --overwrite rewind) are left alone.
void prune_checkpoints(const std::string& root_dir, int keep);

// The iteration the tracker in `root_dir` names; throws if there is no tracker.
int64_t read_checkpoint_tracker(const std::string& root_dir);

}  // namespace troupe
