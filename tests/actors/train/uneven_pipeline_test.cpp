// Uneven pipeline splits on CPU devices (model/pipeline_split.hpp):
// - every split reproduces the single-device Trainer (loss and grad norm per iteration for 10
//   iterations, gathered weights, validation loss; pipeline_test_util.hpp's tolerances): first
//   and/or last stage with fewer layers (--decoder-first/last-pipeline-num-layers), the
//   embedding and loss counted as layers (--account-for-*-in-pipeline-split, down to stages and
//   chunks that hold only the embedding or only the loss), 1F1B with 2 and 4 stages and
//   interleaved;
// - checkpoints: saved under an uneven split, loaded under PP1 (and an even split saved and
//   loaded under an uneven one), the next iterations give the losses of the run that went on;
// - --trace records each chunk's layers, and `troupe replay` analyses the trace with what-ifs
//   that keep the recorded chunks.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedules/replay.hpp"
#include "schedules/trace.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

struct Split {
  std::string name;
  bool llama = false;
  int layers = 8, P = 1, V = 1;
  PipelineSplit split;
};

actors::TrainingConfig config_of(const Split& s) {
  actors::TrainingConfig t = tiny_config(s.llama, s.P, s.V);
  t.model.num_layers = s.layers;
  t.parallel.split = s.split;
  return t;
}

PipelineSplit first_last(std::optional<int> first, std::optional<int> last) {
  PipelineSplit p;
  p.first_stage_layers = first;
  p.last_stage_layers = last;
  return p;
}
PipelineSplit accounted(bool embedding, bool loss) {
  PipelineSplit p;
  p.account_for_embedding = embedding;
  p.account_for_loss = loss;
  return p;
}

class UnevenParity : public ::testing::TestWithParam<Split> {};

TEST_P(UnevenParity, SameLossAsOneDevice) {
  const Split& s = GetParam();
  const actors::TrainingConfig config = config_of(s);
  // The layout is the one asked for (a split that fell back to equal chunks would pass too).
  const std::vector<ChunkLayers> chunks = pipeline_split(s.layers, s.P, s.V, s.split);
  const auto fewer = [](const ChunkLayers& a, const ChunkLayers& b) { return a.num_layers < b.num_layers; };
  ASSERT_NE(std::min_element(chunks.begin(), chunks.end(), fewer)->num_layers,
            std::max_element(chunks.begin(), chunks.end(), fewer)->num_layers)
      << s.name << ": not an uneven split";
  {  // ... and the runtime built it: stage 0's chunks hold the parameters of their layers.
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    int64_t want = 0;
    for (int c = 0; c < s.V; ++c) {
      const int vs = c * s.P;
      const ChunkLayers& l = chunks[size_t(vs)];
      want += ParamLayout(config.model, {l.first_layer, l.num_layers, vs == 0, vs == s.P * s.V - 1}).size();
    }
    EXPECT_EQ(run.memory_report().parameters, want) << s.name;
  }
  expect_parity(s.name, config);
}

INSTANTIATE_TEST_SUITE_P(
    Splits, UnevenParity,
    ::testing::Values(
        // Stage layers 1, 7: the tied embedding's two copies on stages of different sizes.
        Split{"gpt2_PP2_first1", false, 8, 2, 1, first_last(1, {})},
        // 3, 3, 3, 1 (untied output layer).
        Split{"llama_PP4_last1", true, 10, 4, 1, first_last({}, 1)},
        // 1, 3, 3, 1.
        Split{"gpt2_PP4_first1_last1", false, 8, 4, 1, first_last(1, 1)},
        // 3, 4: the embedding counted as a layer.
        Split{"llama_PP2_embedding", true, 7, 2, 1, accounted(true, false)},
        // 0, 1, 1, 0: the first stage holds only the embedding, the last only the LM head and loss.
        Split{"gpt2_PP4_embedding_loss", false, 2, 4, 1, accounted(true, true)},
        // Interleaved, chunks 1, 3 | 1, 3.
        Split{"gpt2_PP2_V2_first2", false, 8, 2, 2, first_last(2, {})},
        // Interleaved, chunks 1, 2 | 2, 1.
        Split{"llama_PP2_V2_embedding_loss", true, 6, 2, 2, accounted(true, true)}),
    [](const auto& info) { return info.param.name; });

// 5 iterations under `saver`, saved; then 3 more under `saver` and, loaded from the
// checkpoint, 3 under `loader`: the same losses and grad norms.
void expect_same_after_load(const Split& saver, const Split& loader, const std::string& dir) {
  std::vector<IterationStats> went_on;
  {
    const actors::TrainingConfig t = config_of(saver);
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    for (int i = 0; i < 5; ++i) run.train_iteration();
    run.save_checkpoint(dir);
    for (int i = 0; i < 3; ++i) went_on.push_back(run.train_iteration());
  }
  const actors::TrainingConfig t = config_of(loader);
  const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(dir);
  actors::TrainingRun run(t, loader_at(t, meta.consumed_samples), nullptr);
  run.load_checkpoint(dir);
  ASSERT_EQ(run.iteration(), 5);
  for (size_t i = 0; i < went_on.size(); ++i) {
    const IterationStats s = run.train_iteration();
    EXPECT_LT(rel(s.loss, went_on[i].loss), 1e-5)
        << saver.name << " -> " << loader.name << " iteration " << 6 + i << ": " << s.loss << " vs " << went_on[i].loss;
    EXPECT_LT(rel(s.grad_norm, went_on[i].grad_norm), 1e-4)
        << saver.name << " -> " << loader.name << " iteration " << 6 + i;
  }
}

TEST(UnevenCheckpoint, UnevenSplitLoadsUnderOneStage) {
  TempDir dir("ckpt_uneven");
  const Split uneven{"PP4_first1_last1", false, 8, 4, 1, first_last(1, 1)};
  expect_same_after_load(uneven, Split{"PP1", false, 8, 1, 1, {}}, dir / "to_pp1");
  // And back: an even PP2 checkpoint into the uneven PP4 and an interleaved uneven split.
  expect_same_after_load(Split{"PP2", false, 8, 2, 1, {}}, uneven, dir / "to_uneven");
  expect_same_after_load(Split{"PP2", false, 8, 2, 1, {}}, Split{"PP2_V2_first2", false, 8, 2, 2, first_last(2, {})},
                         dir / "to_interleaved");
}

TEST(UnevenCheckpoint, AccountedSplitLoadsUnderOneStage) {
  TempDir dir("ckpt_accounted");
  expect_same_after_load(Split{"llama_PP2_embedding_loss", true, 6, 2, 2, accounted(true, true)},
                         Split{"llama_PP1", true, 6, 1, 1, {}}, dir / "to_pp1");
}

TEST(UnevenTrace, RecordsEachChunksLayersForReplay) {
  TempDir dir("trace_uneven");
  actors::TrainingConfig config = config_of(Split{"PP2_first1", false, 7, 2, 1, first_last(1, {})});
  config.trace_path = dir / "run.trace";
  {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    for (int i = 0; i < 2; ++i) run.train_iteration();
  }
  const schedules::Trace trace = schedules::trace_read(config.trace_path);
  EXPECT_EQ(trace.header.num_layers, 7);
  EXPECT_EQ(trace.header.chunk_layers, (std::vector<int>{1, 6}));
  // 7 layers do not split evenly in two, but a what-if on the recorded stages keeps the recorded chunks.
  schedules::ReplayOptions options;
  options.what_ifs = {"schedule=gpipe"};
  const schedules::ReplayReport r = schedules::replay_trace(trace, options);
  ASSERT_EQ(r.what_ifs.size(), 1u);
  EXPECT_GT(r.what_ifs[0].simulation.stats.step_ns, 0);
  EXPECT_THROW(schedules::parse_what_if("p=4", trace.header), Error);  // 7 layers over 4 equal chunks
}

}  // namespace
}  // namespace troupe::test
