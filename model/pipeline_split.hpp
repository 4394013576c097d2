// Which transformer layers each pipeline chunk holds: Megatron-Core's even split, its uneven
// split (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers: the
// remaining layers spread evenly over the middle stages) and its "account for" split
// (--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the
// embedding and the loss each counted as one layer of the first / last chunk), with and
// without interleaving (V chunks per stage). Megatron: transformer_block.py
// get_num_layers_to_build, transformer_layer.py get_transformer_layer_offset, the checks of
// transformer_config.py and arguments.py.
//
//   PipelineSplit split{.first_stage_layers = 1};
//   std::vector<ChunkLayers> chunks = pipeline_split(/*num_layers=*/7, /*stages=*/3, /*chunks=*/1, split);
//   // chunks[0] = {0, 1}, chunks[1] = {1, 3}, chunks[2] = {4, 3}
//
// Chunk c of stage s is virtual stage c * P + s (Megatron's placement); the chunks tile the
// model's layers in virtual-stage order. A chunk may hold no layer: the first one when it
// holds only the embedding, the last one when it holds only the loss.
#pragma once

#include <optional>
#include <vector>

namespace troupe {

// Megatron's flags for the layer split; all unset: every chunk holds num_layers / (P * V).
struct PipelineSplit {
  std::optional<int> first_stage_layers;  // --decoder-first-pipeline-num-layers
  std::optional<int> last_stage_layers;   // --decoder-last-pipeline-num-layers
  bool account_for_embedding = false;     // --account-for-embedding-in-pipeline-split
  bool account_for_loss = false;          // --account-for-loss-in-pipeline-split
  bool uneven() const { return first_stage_layers || last_stage_layers; }
  bool even() const { return !uneven() && !account_for_embedding && !account_for_loss; }
  bool operator==(const PipelineSplit&) const = default;
};

struct ChunkLayers {
  int first_layer = 0;
  int num_layers = 0;
  bool operator==(const ChunkLayers&) const = default;
};

// Throws troupe::Error naming the flags when Megatron refuses the combination (or it cannot
// be built): first/last layers with an account-for flag, a first/last count <= 0 or not a
// multiple of the chunks per stage, first + last more than --num-layers, middle layers not
// divisible by the middle stages (or by the chunks per stage on each), layers left without a
// middle stage or middle stages without a layer, or (with the account-for flags) --num-layers
// plus the accounted layers not divisible by the stages (times the chunks per stage).
void validate_pipeline_split(int num_layers, int stages, int chunks, const PipelineSplit& split);

// Layers of every chunk, indexed by virtual stage c * stages + s (stages * chunks entries).
// Validates first (validate_pipeline_split).
std::vector<ChunkLayers> pipeline_split(int num_layers, int stages, int chunks, const PipelineSplit& split);

// The layers of each chunk in virtual-stage order as a trace header records them
// (schedules/trace.hpp "chunk_layers"): empty for an even split.
std::vector<int> recorded_chunk_layers(int num_layers, int stages, int chunks, const PipelineSplit& split);

// --num-layers-per-virtual-pipeline-stage N: the chunks per stage Megatron derives from it,
// ((num_layers + accounted layers) / stages) / N; throws naming the flags when that does not
// divide, or when the first/last stage layers are given (Megatron then asks for
// --num-virtual-stages-per-pipeline-rank).
int chunks_from_layers_per_virtual_stage(int num_layers, int stages, int layers_per_virtual_stage,
                                         const PipelineSplit& split);

}  // namespace troupe
