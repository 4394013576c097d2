// How a model chunk's parameters and optimizer state map onto the tensors of a checkpoint
// (storage/), both ways, whatever the tensor, pipeline and data-parallel layout.
//
// Tensors are stored by global parameter name (Adam moments as "optimizer.exp_avg.<name>" and
// "optimizer.exp_avg_sq.<name>"), with their global shape, the vocabulary padding left out
// (rows >= vocab_size of the word embedding and output layer), so any layout reads them.
// Each rank writes the slices it owns: its tensor shard's pieces (a parameter every tensor
// rank holds whole: tensor rank 0 only), and of those the flat ranges its optimizer holds
// (the distributed optimizer's shard; without it data rank 0 writes everything, and under
// expert parallelism data ranks 1..EP-1 their experts: any expert layout reads them). A tied
// embedding is written by the chunk that holds the embedding, not by the output layer's copy.
//
//   ChunkState s{.writer_id = rank, .layout = chunk.layout(), .ranges = {{0, layout.size()}},
//                .tensors = {{"", master}, {kExpAvgPrefix, m}, {kExpAvgSqPrefix, v}}};
//   write_chunk_state(writer, s);
//   ...
//   read_chunk_tensor(reader, layout, "", params);   // any layout: its own pieces
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/train/optimizer.hpp"
#include "model/param_layout.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/checkpoint_writer.hpp"
#include "storage/shard_geometry.hpp"

namespace troupe::actors {

inline const std::string kExpAvgPrefix = "optimizer.exp_avg.";
inline const std::string kExpAvgSqPrefix = "optimizer.exp_avg_sq.";

// Where parameter `p` of `layout` lies in the stored global tensor.
ShardGeometry checkpoint_geometry(const ParamLayout& layout, const ParamInfo& p);

// One rank's part of a checkpoint for one chunk: the flat elements `ranges` of the chunk's
// buffers, whose values each tensor holds one range after another (the Optimizer's layout
// of its shard); each tensor is stored under its prefix + the parameter's name.
struct ChunkState {
  int writer_id = 0;
  ParamLayout layout;
  std::vector<OptimizerShard::Range> ranges;
  std::vector<std::pair<std::string, Tensor>> tensors;  // (name prefix, host f32)
  // Expert parallelism: a data rank other than 0 writes only its routed experts (data rank 0
  // writes the rest), so each tensor is written once.
  bool experts_only = false;
  // Non-trained tensors this writer stores whole, by global name (host f32): the MoE expert
  // bias (GptChunk::moe_buffers) and FP8's scaling state (GptChunk::fp8_buffers), from one
  // replica only.
  std::vector<std::pair<std::string, Tensor>> buffers;
};
void write_chunk_state(CheckpointWriter& writer, const ChunkState& state);

// Copies the stored f32 tensor `name` whole into `out` (host or device f32, the stored shape).
// Throws naming the tensor and the checkpoint when it is missing or has another shape.
void read_whole_tensor(const CheckpointReader& reader, const std::string& name, const Context& ctx, const Tensor& out);

// Fills `flat` (host f32, layout.size() elements) with prefix + name of every parameter of
// `layout`, each from the slices of the stored tensor its shard holds. Elements the
// checkpoint does not store (padding, vocabulary padding rows) are left as they are. Throws
// naming the tensor and the checkpoint when one is missing or has another shape.
void read_chunk_tensor(const CheckpointReader& reader, const ParamLayout& layout, const std::string& prefix,
                       const Tensor& flat);

// The parameters of the checkpoint of `iteration` in `root` (--ckpt-step; without one the
// tracker's) for `layout` (host f32, zeros where not stored): for generation and export, which
// need no run. Checks the model config first.
Tensor read_checkpoint_params(const std::string& root, const ParamLayout& layout,
                              std::optional<int64_t> iteration = std::nullopt);
// The same from a checkpoint already open.
Tensor read_checkpoint_params(const CheckpointReader& reader, const ParamLayout& layout);

// Writes a whole model's parameters (host f32 of layout.size(), layout of the whole model)
// as checkpoint iteration 0 of `root`, weights only, with the tracker pointing at it; the
// files (source, name there) are copied in. For `troupe convert --from hf`. Returns the
// directory. `root` must hold no checkpoints yet (storage/checkpoint_ownership.hpp): a
// converted model never joins, nor rolls back, another run's directory.
std::string write_params_checkpoint(const std::string& root, const ParamLayout& layout, const Tensor& flat,
                                    const std::vector<std::pair<std::string, std::string>>& files = {});

// Throws naming the first field where the checkpoint's model config differs from `run`'s. A
// field an older checkpoint lacks counts as GptConfig's default (what it was written with).
void check_model_config(const nlohmann::json& run, const nlohmann::json& ckpt, const std::string& dir);

}  // namespace troupe::actors
