#include "actors/train/checkpoint_shards.hpp"

#include <filesystem>

#include "base/check.hpp"
#include "storage/atomic_file.hpp"
#include "storage/checkpoint_ownership.hpp"

namespace troupe::actors {

namespace {

bool vocab_rows(const std::string& name) { return name == kWordEmbeddingName || name == kOutputLayerName; }

// The copy of a tied embedding that a chunk without the embedding keeps for its output layer.
bool tied_copy(const ParamLayout& layout, const ParamInfo& p) {
  return p.name == kWordEmbeddingName && !layout.spec().pre_process;
}

}  // namespace

ShardGeometry checkpoint_geometry(const ParamLayout& layout, const ParamInfo& p) {
  ShardGeometry g{.local_shape = p.shape, .global_shape = p.global_shape, .split_dim = p.split_dim, .pieces = p.pieces};
  if (vocab_rows(p.name)) g.global_shape[0] = layout.config().vocab_size;
  return g;
}

void write_chunk_state(CheckpointWriter& writer, const ChunkState& s) {
  const ParamLayout& layout = s.layout;
  const bool tensor_rank0 = layout.tensor_shard().rank == 0;
  int64_t packed_start = 0;  // where the current range starts in the packed tensors
  for (const OptimizerShard::Range& r : s.ranges) {
    for (const ParamInfo& p : layout.params()) {
      if ((p.replicated() && !tensor_rank0) || tied_copy(layout, p)) continue;
      if (s.experts_only && !ParamLayout::is_expert_param(p.name)) continue;
      const int64_t lo = std::max(r.begin, p.offset), hi = std::min(r.end, p.offset + p.numel());
      if (lo >= hi) continue;
      const ShardGeometry g = checkpoint_geometry(layout, p);
      // The boxes of the parameter's elements [lo, hi) are contiguous runs in the packed tensor.
      int64_t src = packed_start + (lo - r.begin);
      for (const ShardSlice& box : flat_range_boxes(p.shape, lo - p.offset, hi - p.offset)) {
        for (const BoxPlacement& place : place_box(g, box)) {
          for (const auto& [prefix, packed] : s.tensors) {
            Tensor out = Tensor::host(DType::f32, place.global.length);
            copy_box_region(packed.data_as<float>() + src, box, out.data(), place.local, place.local, sizeof(float));
            writer.add_shard(s.writer_id, prefix + p.name, g.global_shape, place.global, out);
          }
        }
        src += box.numel();
      }
    }
    packed_start += r.end - r.begin;
  }
  for (const auto& [name, t] : s.buffers)
    writer.add_shard(s.writer_id, name, t.shape(), ShardSlice::whole(t.shape()), t);
}

void read_whole_tensor(const CheckpointReader& reader, const std::string& name, const Context& ctx, const Tensor& out) {
  TROUPE_CHECK(reader.has(name), "checkpoint '", reader.dir(), "' has no tensor '", name,
               "', which this model needs: load a checkpoint saved by a run of this model");
  const TensorRecord& rec = reader.info(name);
  TROUPE_CHECK(rec.shape == out.shape() && rec.dtype == DType::f32, "tensor '", name, "' in checkpoint '", reader.dir(),
               "' is ", dtype_name(rec.dtype), " ", shape_str(rec.shape), ", this model needs f32 ",
               shape_str(out.shape()));
  copy(ctx, reader.read_box(name, ShardSlice::whole(rec.shape)), out);
  ctx.synchronize();  // the host tensor read goes away when we return
}

void read_chunk_tensor(const CheckpointReader& reader, const ParamLayout& layout, const std::string& prefix,
                       const Tensor& flat) {
  TROUPE_CHECK(flat.dtype() == DType::f32 && flat.numel() == layout.size(), "read_chunk_tensor: needs a host f32 ",
               "buffer of ", layout.size(), " elements, got ", flat.str());
  for (const ParamInfo& p : layout.params()) {
    const std::string name = prefix + p.name;
    const ShardGeometry g = checkpoint_geometry(layout, p);
    const TensorRecord& rec = reader.info(name);
    TROUPE_CHECK(rec.shape == g.global_shape, "tensor '", name, "' in checkpoint '", reader.dir(), "' has shape ",
                 shape_str(rec.shape), ", this model needs ", shape_str(g.global_shape));
    TROUPE_CHECK(rec.dtype == DType::f32, "tensor '", name, "' in checkpoint '", reader.dir(), "' is ",
                 dtype_name(rec.dtype), ", expected f32");
    float* dst = flat.data_as<float>() + p.offset;
    for (const BoxPlacement& place : place_box(g, ShardSlice::whole(p.shape))) {
      const Tensor part = reader.read_box(name, place.global);
      copy_box_region(part.data(), place.local, dst, ShardSlice::whole(p.shape), place.local, sizeof(float));
    }
  }
}

Tensor read_checkpoint_params(const std::string& root, const ParamLayout& layout, std::optional<int64_t> iteration) {
  return read_checkpoint_params(CheckpointReader::open(root, iteration), layout);
}

Tensor read_checkpoint_params(const CheckpointReader& r, const ParamLayout& layout) {
  check_model_config(to_json(layout.config()), r.metadata().model_config, r.dir());
  Tensor flat = Tensor::host(DType::f32, {layout.size()});
  fill_zero(Context::cpu(), flat);
  read_chunk_tensor(r, layout, "", flat);
  return flat;
}

std::string write_params_checkpoint(const std::string& root, const ParamLayout& layout, const Tensor& flat,
                                    const std::vector<std::pair<std::string, std::string>>& files) {
  TROUPE_CHECK(layout.tensor_shard().size == 1 && layout.spec().pre_process && layout.spec().post_process,
               "write_params_checkpoint needs the whole model's layout");
  check_no_checkpoints(root,
                       "a converted model goes into a new directory, never into another run's; pass another --save");
  CheckpointWriter writer(root, 0);
  write_chunk_state(
      writer,
      {.writer_id = 0, .layout = layout, .ranges = {{0, layout.size()}}, .tensors = {{"", flat}}, .buffers = {}});
  for (const auto& [from, name] : files) copy_file_atomic(from, (std::filesystem::path(writer.dir()) / name).string());
  CheckpointMetadata meta;
  meta.model_config = to_json(layout.config());
  meta.parallel_layout = {
      {"tensor_model_parallel_size", 1}, {"pipeline_model_parallel_size", 1}, {"data_parallel_size", 1}};
  meta.training_state = {{"optimizer_step", 0}, {"optimizer_saved", false}, {"loss_scaler", nullptr}};
  return writer.commit(meta);
}

void check_model_config(const nlohmann::json& run, const nlohmann::json& ckpt, const std::string& dir) {
  TROUPE_CHECK(ckpt.is_object(), "checkpoint '", dir, "': model_config is not an object");
  for (const auto& [key, value] : run.items()) {
    // A checkpoint from before a field existed lacks it: it was written with the default.
    if (!ckpt.contains(key) && value == to_json(GptConfig{}).at(key)) continue;
    TROUPE_CHECK(ckpt.contains(key), "checkpoint '", dir,
                 "' was saved for a different model: its model_config has no '", key, "' (this run: ", value.dump(),
                 ")");
    TROUPE_CHECK(ckpt.at(key) == value, "checkpoint '", dir, "' was saved for a different model: model_config.", key,
                 " is ", ckpt.at(key).dump(), " in the checkpoint, ", value.dump(), " in this run");
  }
  for (const auto& [key, value] : ckpt.items()) {
    TROUPE_CHECK(run.contains(key), "checkpoint '", dir, "' was saved for a different model: its model_config has '",
                 key, "' = ", value.dump(), ", unknown to this run");
  }
}

}  // namespace troupe::actors
