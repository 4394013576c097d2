#include "model/pipeline_split.hpp"

#include <string>

#include "base/check.hpp"

namespace troupe {

namespace {

constexpr const char* kFirst = "--decoder-first-pipeline-num-layers";
constexpr const char* kLast = "--decoder-last-pipeline-num-layers";

// --num-layers plus the embedding and the loss where they count as layers.
int accounted_layers(int num_layers, const PipelineSplit& split) {
  return num_layers + (split.account_for_embedding ? 1 : 0) + (split.account_for_loss ? 1 : 0);
}

// A first/last stage count: positive, a whole number of layers per chunk.
void check_end_stage(const char* flag, int layers, int chunks) {
  TROUPE_CHECK(layers > 0, flag, " must be > 0, got ", layers, ": leave it out for an even split");
  TROUPE_CHECK(layers % chunks == 0, flag, " (", layers, ") must be divisible by the ", chunks,
               " model chunks per pipeline stage (--num-virtual-stages-per-pipeline-rank)");
}

// The first/last flags given, with their values: "--decoder-first-pipeline-num-layers 1", "... and ...".
std::string given_end_stages(const PipelineSplit& split) {
  std::string out;
  if (split.first_stage_layers) out = str_cat(kFirst, " ", *split.first_stage_layers);
  if (split.last_stage_layers) out += str_cat(out.empty() ? "" : " and ", kLast, " ", *split.last_stage_layers);
  return out;
}

void validate_uneven(int num_layers, int stages, int chunks, const PipelineSplit& split) {
  const int first = split.first_stage_layers.value_or(0), last = split.last_stage_layers.value_or(0);
  int middle_stages = stages;
  if (split.first_stage_layers) {
    check_end_stage(kFirst, first, chunks);
    --middle_stages;
  }
  if (split.last_stage_layers) {
    check_end_stage(kLast, last, chunks);
    --middle_stages;
  }
  const std::string given = given_end_stages(split);
  TROUPE_CHECK(middle_stages >= 0, given, " need --pipeline-model-parallel-size >= 2 (a first and a last stage), got ",
               stages);
  const int middle_layers = num_layers - first - last;
  TROUPE_CHECK(middle_layers >= 0, given, " exceed the ", num_layers,
               " layers of --num-layers: give fewer layers to the first and last stages");
  TROUPE_CHECK(middle_layers == 0 || middle_stages > 0, given, " leave ", middle_layers, " of the ", num_layers,
               " layers (--num-layers) for no middle stage: with --pipeline-model-parallel-size ", stages,
               " the first and last stages must hold all layers");
  TROUPE_CHECK(middle_layers > 0 || middle_stages == 0, given, " leave no layer of the ", num_layers,
               " (--num-layers) for the ", middle_stages,
               " middle pipeline stage(s): give fewer layers to the first or last stage");
  if (middle_stages == 0) return;
  TROUPE_CHECK(middle_layers % middle_stages == 0, "the ", middle_layers, " layers that ", given,
               " leave of --num-layers ", num_layers, " must split evenly over the ", middle_stages,
               " middle pipeline stage(s) of --pipeline-model-parallel-size ", stages);
  TROUPE_CHECK((middle_layers / middle_stages) % chunks == 0, "the ", middle_layers / middle_stages,
               " layers on each middle pipeline stage (what ", given, " leave of --num-layers ", num_layers,
               ") must be divisible by the ", chunks,
               " model chunks per stage (--num-virtual-stages-per-pipeline-rank)");
}

void validate_accounted(int num_layers, int stages, int chunks, const PipelineSplit& split) {
  const int layers = accounted_layers(num_layers, split);
  TROUPE_CHECK(layers % stages == 0, "--num-layers (", num_layers, ") plus the ", layers - num_layers,
               " layer(s) that --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split "
               "count must be divisible by --pipeline-model-parallel-size (",
               stages, ")");
  TROUPE_CHECK((layers / stages) % chunks == 0, "the ", layers / stages,
               " layers of each pipeline stage (--num-layers plus what --account-for-embedding-in-pipeline-split / "
               "--account-for-loss-in-pipeline-split count) must be divisible by the ",
               chunks, " model chunks per stage");
}

// Megatron's get_num_layers_to_build for stage s, chunk c.
int chunk_size(int num_layers, int stages, int chunks, const PipelineSplit& split, int s, int c) {
  if (split.uneven()) {
    const int first = split.first_stage_layers.value_or(0), last = split.last_stage_layers.value_or(0);
    const int middle_stages = stages - (split.first_stage_layers ? 1 : 0) - (split.last_stage_layers ? 1 : 0);
    int stage_layers = middle_stages > 0 ? (num_layers - first - last) / middle_stages : 0;
    if (s == 0 && split.first_stage_layers) stage_layers = first;
    if (s == stages - 1 && split.last_stage_layers) stage_layers = last;
    return stage_layers / chunks;
  }
  int layers = accounted_layers(num_layers, split) / stages / chunks;
  // The embedding (loss) takes a layer's place in the first (last) chunk of the model.
  if (split.account_for_embedding && s == 0 && c == 0) --layers;
  if (split.account_for_loss && s == stages - 1 && c == chunks - 1) --layers;
  return layers;
}

}  // namespace

void validate_pipeline_split(int num_layers, int stages, int chunks, const PipelineSplit& split) {
  TROUPE_CHECK(num_layers >= 1, "--num-layers must be >= 1, got ", num_layers);
  TROUPE_CHECK(stages >= 1, "--pipeline-model-parallel-size must be >= 1, got ", stages);
  TROUPE_CHECK(chunks >= 1, "model chunks per pipeline stage must be >= 1, got ", chunks);
  TROUPE_CHECK(!(split.uneven() && (split.account_for_embedding || split.account_for_loss)), kFirst, " and ", kLast,
               " cannot be combined with --account-for-embedding-in-pipeline-split or "
               "--account-for-loss-in-pipeline-split (Megatron refuses it too): give one kind of split");
  if (split.uneven()) {
    validate_uneven(num_layers, stages, chunks, split);
  } else if (!split.even()) {
    validate_accounted(num_layers, stages, chunks, split);
  } else {
    TROUPE_CHECK(chunks > 1 || num_layers % stages == 0, "--num-layers (", num_layers,
                 ") must be divisible by --pipeline-model-parallel-size (", stages, "), or give an uneven split (",
                 kFirst, ", ", kLast, ")");
    TROUPE_CHECK(num_layers % (stages * chunks) == 0, "--num-layers (", num_layers,
                 ") must be divisible by --pipeline-model-parallel-size (", stages, ") times the ", chunks,
                 " model chunks per stage (--num-layers-per-virtual-pipeline-stage, "
                 "--num-virtual-stages-per-pipeline-rank)");
  }
}

std::vector<ChunkLayers> pipeline_split(int num_layers, int stages, int chunks, const PipelineSplit& split) {
  validate_pipeline_split(num_layers, stages, chunks, split);
  // Megatron's offsets are the running sum of the sizes in virtual-stage order.
  std::vector<ChunkLayers> out;
  int next = 0;
  for (int c = 0; c < chunks; ++c) {
    for (int s = 0; s < stages; ++s) {
      const int n = chunk_size(num_layers, stages, chunks, split, s, c);
      out.push_back({next, n});
      next += n;
    }
  }
  TROUPE_CHECK(next == num_layers, "pipeline_split: the chunks hold ", next, " layers, the model ", num_layers);
  return out;
}

std::vector<int> recorded_chunk_layers(int num_layers, int stages, int chunks, const PipelineSplit& split) {
  std::vector<int> out;
  if (split.even()) return out;
  for (const ChunkLayers& c : pipeline_split(num_layers, stages, chunks, split)) out.push_back(c.num_layers);
  return out;
}

int chunks_from_layers_per_virtual_stage(int num_layers, int stages, int layers_per_virtual_stage,
                                         const PipelineSplit& split) {
  TROUPE_CHECK(!split.uneven(), "--num-layers-per-virtual-pipeline-stage cannot be combined with ", kFirst, " or ",
               kLast, " (Megatron refuses it too): give --num-virtual-stages-per-pipeline-rank instead");
  TROUPE_CHECK(layers_per_virtual_stage >= 1, "--num-layers-per-virtual-pipeline-stage must be >= 1, got ",
               layers_per_virtual_stage);
  const int layers = accounted_layers(num_layers, split);
  TROUPE_CHECK(stages >= 1 && layers % stages == 0, "--num-layers (", num_layers, ")",
               split.even() ? "" : " plus the layers the --account-for-* flags count", " must be divisible by ",
               "--pipeline-model-parallel-size (", stages, ") for --num-layers-per-virtual-pipeline-stage");
  const int per_stage = layers / stages;
  TROUPE_CHECK(per_stage % layers_per_virtual_stage == 0, "--num-layers-per-virtual-pipeline-stage ",
               layers_per_virtual_stage, " does not divide the ", per_stage, " layers of each pipeline stage");
  return per_stage / layers_per_virtual_stage;
}

}  // namespace troupe
