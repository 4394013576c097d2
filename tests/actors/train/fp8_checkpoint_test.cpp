// FP8 scaling state in checkpoints (issue 21), on CPU devices: each layer's amax histories and
// scales are stored by global name ("decoder.layers.<l>.fp8_meta.forward.amax_history", ...), so
// a delayed-scaling run saved at iteration 5 and resumed gives iterations 6..10 bit for bit as the
// uninterrupted run, under one device, PP2 (ZB-H1 too) and TP2 x PP2 x DP2; a PP2 checkpoint
// loads onto PP4 and one device (by layer) with the uninterrupted losses (1e-6), a TP2 x PP2 x DP2
// one onto one device within 1e-5. A checkpoint
// without the state loads with the scales at 1 (and a warning); another --fp8-amax-history-len
// is refused naming the flag; without FP8 nothing of it is stored.
#include <gtest/gtest.h>

#include "storage/checkpoint_reader.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

struct Layout {
  int T = 1, P = 1, D = 1;
  bool zb = false;  // --pipeline-schedule zb-h1
  bool fp8 = true;
  int history = 4;
};

std::string name_of(const Layout& l) { return str_cat("TP", l.T, "_PP", l.P, "_DP", l.D, l.zb ? "_ZbH1" : ""); }
void PrintTo(const Layout& l, std::ostream* os) { *os << name_of(l); }

actors::TrainingConfig config(const Layout& l) {
  actors::TrainingConfig t = tiny_config(false, l.P, 1, 8);
  t.model.num_layers = 4;
  t.parallel.tensor_size = l.T;
  t.parallel.data_size = l.D;
  t.parallel.sequence_parallel = l.T > 1;
  t.parallel.distributed_optimizer = l.D > 1;
  if (l.zb) t.parallel.schedule = schedules::Schedule::zb_h1;
  if (l.fp8)
    t.fp8 = fp8_recipe_from_flags(
        {.format = "hybrid", .recipe = "delayed", .amax_history_len = l.history, .amax_compute_algo = "max"});
  return t;
}

std::vector<IterationStats> straight(const Layout& l) {
  actors::TrainingConfig t = config(l);
  actors::TrainingRun run(t, loader_at(t, 0), nullptr);
  const std::vector<IterationStats> all = train(run, 10);
  return {all.begin() + 5, all.end()};
}

void save_at_5(const Layout& saver, const std::string& dir) {
  actors::TrainingConfig t = config(saver);
  actors::TrainingRun run(t, loader_at(t, 0), nullptr);
  train(run, 5);
  run.save_checkpoint(dir);
}

std::vector<IterationStats> load_and_train(const Layout& loader, const std::string& dir) {
  actors::TrainingConfig t = config(loader);
  const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(dir);
  actors::TrainingRun run(t, loader_at(t, meta.consumed_samples), nullptr);
  run.load_checkpoint(dir);
  return train(run, 5);
}

class Fp8Resume : public ::testing::TestWithParam<Layout> {};

TEST_P(Fp8Resume, BitIdenticalLosses) {
  const Layout l = GetParam();
  TempDir dir("fp8_ckpt_exact");
  const std::vector<IterationStats> want = straight(l);
  save_at_5(l, dir / "c");
  const std::vector<IterationStats> got = load_and_train(l, dir / "c");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].loss, want[i].loss) << "iteration " << i + 6;
    EXPECT_EQ(got[i].grad_norm, want[i].grad_norm) << "iteration " << i + 6;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Fp8Resume,
                         ::testing::Values(Layout{}, Layout{.P = 2}, Layout{.P = 2, .zb = true},
                                           Layout{.T = 2, .P = 2, .D = 2}),
                         [](const auto& info) { return name_of(info.param); });

// Layers move between stages (PP2 -> PP4, one device): each layer's state goes with it.
TEST(Fp8Checkpoint, ReshardsByLayer) {
  TempDir dir("fp8_ckpt_reshard");
  const Layout saver{.P = 2};
  const std::vector<IterationStats> want = straight(saver);
  save_at_5(saver, dir / "c");
  for (const auto& [loader, bound] : {std::pair{Layout{.P = 4}, 0.0}, std::pair{Layout{}, 1e-6}}) {
    const std::vector<IterationStats> got = load_and_train(loader, dir / "c");
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, rel(got[i].loss, want[i].loss));
      EXPECT_LE(rel(got[i].loss, want[i].loss), bound) << name_of(loader) << " iteration " << i + 6;
    }
    std::printf("  PP2 -> %s: iterations 6..10 against the uninterrupted run: max relative loss gap %.2e\n",
                name_of(loader).c_str(), worst);
  }
}

// From TP2 x PP2 x DP2 onto one device: the tensor-parallel ranks' reduced amaxes (the same on
// every rank) load; the losses within checkpoint_resume_test's resharding bound.
TEST(Fp8Checkpoint, TensorAndDataParallelOntoOneDevice) {
  TempDir dir("fp8_ckpt_tp");
  const Layout saver{.T = 2, .P = 2, .D = 2};
  const std::vector<IterationStats> want = straight(saver);
  save_at_5(saver, dir / "c");
  const std::vector<IterationStats> got = load_and_train(Layout{}, dir / "c");
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, rel(got[i].loss, want[i].loss));
    EXPECT_LE(rel(got[i].loss, want[i].loss), 1e-5) << "iteration " << i + 6;
  }
  std::printf("  TP2xPP2xDP2 -> one device: max relative loss gap %.2e\n", worst);
}

TEST(Fp8Checkpoint, StateStoredPerLayerOnlyWithFp8) {
  TempDir dir("fp8_ckpt_names");
  save_at_5(Layout{.P = 2}, dir / "fp8");
  save_at_5(Layout{.fp8 = false}, dir / "off");
  const CheckpointReader with = CheckpointReader::open(dir / "fp8");
  const CheckpointReader without = CheckpointReader::open(dir / "off");
  for (int l = 0; l < 4; ++l) {
    const std::string prefix = str_cat("decoder.layers.", l, ".fp8_meta.");
    ASSERT_TRUE(with.has(prefix + "forward.amax_history")) << l;
    EXPECT_EQ(with.info(prefix + "forward.amax_history").shape, (Shape{4, 8}));
    EXPECT_EQ(with.info(prefix + "forward.scale").shape, (Shape{8}));
    EXPECT_EQ(with.info(prefix + "backward.amax_history").shape, (Shape{4, 4}));
    EXPECT_EQ(with.info(prefix + "backward.scale_inv").shape, (Shape{4}));
    // After 5 steps the scales have moved from 1.
    const Tensor scale = with.read_box(prefix + "forward.scale", ShardSlice::whole({8}));
    EXPECT_NE(scale.data_as<float>()[0], 1.0f) << l;
    EXPECT_FALSE(without.has(prefix + "forward.scale")) << l;
  }
}

TEST(Fp8Checkpoint, WithoutTheStateTheScalesStartAtOne) {
  TempDir dir("fp8_ckpt_none");
  save_at_5(Layout{.fp8 = false}, dir / "c");
  // The scales of the resumed run start at 1: not the uninterrupted FP8 run's numbers, but a run.
  const std::vector<IterationStats> got = load_and_train(Layout{}, dir / "c");
  ASSERT_EQ(got.size(), 5u);
  for (const IterationStats& s : got) EXPECT_TRUE(std::isfinite(s.loss));
}

TEST(Fp8Checkpoint, OtherHistoryLengthIsRefusedNamingTheFlag) {
  TempDir dir("fp8_ckpt_len");
  save_at_5(Layout{}, dir / "c");
  try {
    load_and_train(Layout{.history = 2}, dir / "c");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fp8-amax-history-len"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe::test
