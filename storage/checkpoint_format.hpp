// The on-disk format of Troupe checkpoints (Megatron's directory layout, our own index).
//
//   <root>/latest_checkpointed_iteration.txt   "100\n": the newest COMPLETE checkpoint
//   <root>/iter_0000100/metadata.json          written last; its presence marks completeness
//   <root>/iter_0000100/shard_0000.bin         one raw file per writer
//
// A shard file is raw little-endian tensor bytes, each shard starting at a multiple of
// kShardAlignment (zero padding between), so a reader can map and view them. Everything
// about the bytes lives in metadata.json:
//
//   {"format": "troupe-checkpoint", "version": 1, "checksum": "xxh64",
//    "iteration": 100, "consumed_samples": 51200,
//    "model_config": {...}, "parallel_layout": {...}, "rng_state": {...},   // caller's blobs
//    "files": {"shard_0000.bin": {"bytes": 4096}},
//    "tensors": {"wte": {"dtype": "bf16", "shape": [50304, 768],
//      "shards": [{"offset": [0, 0], "length": [25152, 768], "file": "shard_0000.bin",
//                  "byte_offset": 0, "byte_length": 38633472, "xxh64": "9f0c..."}]}}}
//
// A shard's slice is a box (offset + length per dimension) of the global tensor, stored
// row-major; the shards of a tensor tile its global shape exactly (checked on commit and
// on open). The checksum is XXH64 (seed 0) of the shard's bytes, written as 16 hex digits
// (a JSON number would lose bits in other readers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/dtype.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr const char* kCheckpointFormatName = "troupe-checkpoint";
inline constexpr const char* kCheckpointTrackerName = "latest_checkpointed_iteration.txt";
inline constexpr const char* kCheckpointMetadataName = "metadata.json";
inline constexpr size_t kShardAlignment = 64;

// "iter_0000100" (Megatron's name: at least 7 digits).
std::string checkpoint_iteration_dir_name(int64_t iteration);
// "shard_0003.bin".
std::string checkpoint_shard_file_name(int writer_id);

// XXH64 of `n` bytes (the reference algorithm, seed 0 by default).
uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);
std::string checksum_hex(uint64_t h);

// A box of a global tensor: `offset[d]` and `length[d]` per dimension.
struct ShardSlice {
  Shape offset;
  Shape length;
  // Rows [begin, end) of a tensor of `global_shape`, every other dimension whole.
  static ShardSlice rows(const Shape& global_shape, int64_t begin, int64_t end);
  // The whole tensor.
  static ShardSlice whole(const Shape& global_shape);
  int64_t numel() const { return shape_numel(length); }
  std::string str() const;  // "[0:4, 0:768]"
};

struct ShardRecord {
  ShardSlice slice;
  std::string file;  // relative to the iteration directory
  uint64_t byte_offset = 0;
  uint64_t byte_length = 0;
  uint64_t checksum = 0;  // xxh64
};

struct TensorRecord {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;  // global
  std::vector<ShardRecord> shards;
};

// What the caller supplies on commit and gets back on load; the blobs are opaque here.
struct CheckpointMetadata {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  nlohmann::json model_config = nlohmann::json::object();
  nlohmann::json parallel_layout = nlohmann::json::object();
  nlohmann::json rng_state = nlohmann::json::object();
  // Optimizer step count, loss-scaler state, ... (absent in older files: an empty object).
  nlohmann::json training_state = nlohmann::json::object();
};

// Throws (naming the tensor and `where`) unless the slice lies inside `shape` and the shards
// tile the global shape exactly: every byte_length matches, no overlaps, nothing missing.
void validate_tensor_record(const TensorRecord& t, const std::string& where);
void validate_slice(const Shape& global_shape, const ShardSlice& slice, const std::string& what);

nlohmann::json tensor_record_to_json(const TensorRecord& t);
// With !validate, the shards need not tile the shape yet (one process's part of a checkpoint).
TensorRecord tensor_record_from_json(const std::string& name, const nlohmann::json& j, const std::string& where,
                                     bool validate = true);

}  // namespace troupe
