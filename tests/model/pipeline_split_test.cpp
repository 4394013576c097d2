// The layer split against Megatron-Core's: every expected (first layer, layers) below is what
// get_transformer_layer_offset and get_num_layers_to_build (transformer_layer.py,
// transformer_block.py) return for (pp_rank, vp_stage) in virtual-stage order, and the
// refusals follow transformer_config.py and arguments.py.
#include <gtest/gtest.h>

#include <string>

#include "base/check.hpp"
#include "model/pipeline_split.hpp"

namespace troupe {
namespace {

using Chunks = std::vector<ChunkLayers>;

struct Case {
  int layers, stages, chunks;
  PipelineSplit split;
  Chunks expected;
};

PipelineSplit first_last(std::optional<int> first, std::optional<int> last) {
  return {.first_stage_layers = first, .last_stage_layers = last};
}
PipelineSplit accounted(bool embedding, bool loss) {
  PipelineSplit s;
  s.account_for_embedding = embedding;
  s.account_for_loss = loss;
  return s;
}

TEST(PipelineSplit, MatchesMegatron) {
  const std::vector<Case> cases = {
      // Even splits.
      {8, 2, 1, {}, {{0, 4}, {4, 4}}},
      {8, 4, 1, {}, {{0, 2}, {2, 2}, {4, 2}, {6, 2}}},
      {16, 4, 2, {}, {{0, 2}, {2, 2}, {4, 2}, {6, 2}, {8, 2}, {10, 2}, {12, 2}, {14, 2}}},
      // --decoder-first/last-pipeline-num-layers, 1F1B.
      {7, 2, 1, first_last(1, {}), {{0, 1}, {1, 6}}},
      {7, 3, 1, first_last(1, {}), {{0, 1}, {1, 3}, {4, 3}}},
      {8, 4, 1, first_last(1, 1), {{0, 1}, {1, 3}, {4, 3}, {7, 1}}},
      {11, 4, 1, first_last({}, 2), {{0, 3}, {3, 3}, {6, 3}, {9, 2}}},
      {6, 2, 1, first_last(2, 4), {{0, 2}, {2, 4}}},
      {4, 1, 1, first_last(4, {}), {{0, 4}}},
      // ... interleaved: each chunk of a stage holds that stage's layers / V.
      {8, 2, 2, first_last(2, {}), {{0, 1}, {1, 3}, {4, 1}, {5, 3}}},
      {8, 4, 2, first_last(2, 2), {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}, {7, 1}}},
      {12, 3, 2, first_last(2, 2), {{0, 1}, {1, 4}, {5, 1}, {6, 1}, {7, 4}, {11, 1}}},
      {10, 3, 2, first_last({}, 2), {{0, 2}, {2, 2}, {4, 1}, {5, 2}, {7, 2}, {9, 1}}},
      // --account-for-embedding/loss-in-pipeline-split, 1F1B.
      {7, 2, 1, accounted(true, false), {{0, 3}, {3, 4}}},
      {7, 2, 1, accounted(false, true), {{0, 4}, {4, 3}}},
      {6, 2, 1, accounted(true, true), {{0, 3}, {3, 3}}},
      {6, 4, 1, accounted(true, true), {{0, 1}, {1, 2}, {3, 2}, {5, 1}}},
      {4, 1, 1, accounted(true, true), {{0, 4}}},
      // ... interleaved, with chunks holding only the embedding or only the loss.
      {14, 4, 2, accounted(true, true), {{0, 1}, {1, 2}, {3, 2}, {5, 2}, {7, 2}, {9, 2}, {11, 2}, {13, 1}}},
      {6, 2, 2, accounted(true, true), {{0, 1}, {1, 2}, {3, 2}, {5, 1}}},
      {2, 2, 2, accounted(true, true), {{0, 0}, {0, 1}, {1, 1}, {2, 0}}},
      {7, 4, 2, accounted(true, false), {{0, 0}, {0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
  };
  for (const Case& c : cases) {
    const std::string label = std::to_string(c.layers) + " layers, P=" + std::to_string(c.stages) +
                              " V=" + std::to_string(c.chunks) +
                              " first=" + std::to_string(c.split.first_stage_layers.value_or(-1)) +
                              " last=" + std::to_string(c.split.last_stage_layers.value_or(-1)) +
                              " embedding=" + std::to_string(c.split.account_for_embedding) +
                              " loss=" + std::to_string(c.split.account_for_loss);
    EXPECT_EQ(pipeline_split(c.layers, c.stages, c.chunks, c.split), c.expected) << label;
  }
}

// Megatron divides by zero here (two stages, both given, interleaved); the natural layout.
TEST(PipelineSplit, FirstAndLastWithoutMiddleStagesInterleaved) {
  EXPECT_EQ(pipeline_split(6, 2, 2, first_last(2, 4)), (Chunks{{0, 1}, {1, 2}, {3, 1}, {4, 2}}));
}

// The error's message, or "" when there is none.
std::string refusal(int layers, int stages, int chunks, const PipelineSplit& split) {
  try {
    validate_pipeline_split(layers, stages, chunks, split);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_refused(const std::string& message, const std::vector<std::string>& names) {
  ASSERT_FALSE(message.empty()) << "accepted, expected a refusal naming " << names.front();
  for (const std::string& n : names) EXPECT_NE(message.find(n), std::string::npos) << message;
}

TEST(PipelineSplit, RefusesWhatMegatronRefuses) {
  const std::string first = "--decoder-first-pipeline-num-layers", last = "--decoder-last-pipeline-num-layers";
  const std::string emb = "--account-for-embedding-in-pipeline-split", loss = "--account-for-loss-in-pipeline-split";
  // transformer_config.py: uneven and account-for together.
  PipelineSplit both = first_last(1, {});
  both.account_for_loss = true;
  expect_refused(refusal(8, 2, 1, both), {first, loss});
  // <= 0 layers on the first / last stage.
  expect_refused(refusal(8, 2, 1, first_last(0, {})), {first, "> 0"});
  expect_refused(refusal(8, 2, 1, first_last({}, -1)), {last, "> 0"});
  // Not a multiple of the chunks per stage.
  expect_refused(refusal(8, 2, 2, first_last(3, {})), {first, "chunks"});
  expect_refused(refusal(8, 2, 2, first_last({}, 3)), {last, "chunks"});
  // More layers on the first and last stages than the model has.
  expect_refused(refusal(4, 3, 1, first_last(3, 2)), {first, last, "exceed"});
  // Middle layers that do not split over the middle stages, or over their chunks.
  expect_refused(refusal(8, 4, 1, first_last(1, {})), {first + " 1", "middle"});
  expect_refused(refusal(8, 3, 2, first_last(2, {})), {first, "middle", "chunks"});
  // Layers left with no middle stage, middle stages left with no layer.
  expect_refused(refusal(8, 2, 1, first_last(2, 2)), {first, last, "no middle stage"});
  expect_refused(refusal(2, 3, 1, first_last(1, 1)), {first, last, "no layer"});
  // Both ends of a one-stage pipeline.
  expect_refused(refusal(2, 1, 1, first_last(1, 1)),
                 {first + " 1 and " + last + " 1", "--pipeline-model-parallel-size"});
  // Accounted layers not divisible by the stages, or per stage by the chunks.
  expect_refused(refusal(8, 2, 1, accounted(true, false)), {emb, "--pipeline-model-parallel-size"});
  expect_refused(refusal(8, 2, 2, accounted(true, true)), {emb, loss, "chunks"});
  // Even split.
  expect_refused(refusal(7, 2, 1, {}), {"--num-layers", "--pipeline-model-parallel-size"});
  // And what they accept.
  EXPECT_EQ(refusal(8, 4, 1, first_last(2, {})), "");
  EXPECT_EQ(refusal(7, 2, 1, accounted(true, false)), "");
}

TEST(PipelineSplit, ChunksFromLayersPerVirtualStage) {
  // arguments.py: ((L + accounted) / P) / N.
  EXPECT_EQ(chunks_from_layers_per_virtual_stage(16, 4, 2, {}), 2);
  EXPECT_EQ(chunks_from_layers_per_virtual_stage(14, 4, 2, accounted(true, true)), 2);
  EXPECT_EQ(chunks_from_layers_per_virtual_stage(7, 4, 1, accounted(true, false)), 2);
  EXPECT_THROW(chunks_from_layers_per_virtual_stage(16, 4, 3, {}), Error);
  EXPECT_THROW(chunks_from_layers_per_virtual_stage(14, 4, 2, {}), Error);
  try {
    chunks_from_layers_per_virtual_stage(8, 2, 1, first_last(2, {}));
    ADD_FAILURE() << "accepted --num-layers-per-virtual-pipeline-stage with an uneven split";
  } catch (const Error& e) {
    expect_refused(e.what(), {"--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank"});
  }
}

}  // namespace
}  // namespace troupe
