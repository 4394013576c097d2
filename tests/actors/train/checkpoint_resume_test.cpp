// Checkpoints of a TrainingRun on CPU devices (fp32):
// - exact resume: 10 iterations straight, and 5 + save + load into a new run + 5, give
//   bit-identical losses and grad norms, for several layouts (tensor, pipeline, data parallel,
//   sequence parallel, the distributed optimizer, interleaved chunks, zb-v's V), with a
//   synchronous and an asynchronous save;
// - resharding: saved under TP2xPP2 (and TP2xPP2xDP2 with the distributed optimizer), loaded
//   under TP1xPP1, PP4, TP4 and DP4: the losses of the uninterrupted run (1e-5); a Qwen3-shaped
//   model (q/k norms) from TP2xPP2xDP2 onto TP1xPP1 and PP4; zb-v PP2 onto TP1xPP1, TP2xPP2 into zb-v;
// - errors: another model, a corrupt, truncated or missing shard file name the file and
//   tensor and change nothing on disk; --no-load-rng and --finetune do what they say;
// - the LR schedule resumes at the optimizer's step count (from its start with --no-load-optim).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "actors/train/checkpoint_shards.hpp"
#include "storage/checkpoint_format.hpp"
#include "storage/checkpoint_reader.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

struct Layout {
  int T = 1, P = 1, D = 1;
  bool sp = false, dist = false;
  int V = 1;
  bool qwen3 = false;  // the Llama shape with q/k norms (replicated weights) and a head dimension of 16
  bool zbv = false;    // --pipeline-schedule zb-v (V = 2 in a V: stage 0 holds both copies of the tied embedding)
};

std::string name_of(const Layout& l) {
  return str_cat("TP", l.T, "_PP", l.P, "_DP", l.D, l.V > 1 ? "_V2" : "", l.sp ? "_SP" : "", l.dist ? "_DistOpt" : "",
                 l.qwen3 ? "_Qwen3" : "", l.zbv ? "_ZbV" : "");
}

actors::TrainingConfig config(const Layout& l) {
  actors::TrainingConfig t = tiny_config(/*llama=*/l.qwen3, l.P, l.V, /*microbatches=*/8);
  if (l.qwen3) {
    t.model.qk_layernorm = true;
    t.model.kv_channels = 16;
  }
  t.parallel.tensor_size = l.T;
  t.parallel.data_size = l.D;
  t.parallel.sequence_parallel = l.sp;
  t.parallel.distributed_optimizer = l.dist;
  if (l.zbv) t.parallel.schedule = schedules::Schedule::zb_v;
  return t;
}

// Iterations 6..10 of an uninterrupted run.
std::vector<IterationStats> straight(const Layout& l) {
  actors::TrainingConfig t = config(l);
  actors::TrainingRun run(t, loader_at(t, 0), nullptr);
  const std::vector<IterationStats> all = train(run, 10);
  return {all.begin() + 5, all.end()};
}

// 5 iterations under `saver`, saved (asynchronously: while iterations 6 and 7 run), loaded under `loader`.
std::vector<IterationStats> resumed(const Layout& saver, const Layout& loader, const std::string& dir,
                                    bool async = false) {
  {
    actors::TrainingConfig t = config(saver);
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    train(run, 5);
    if (async) {
      run.start_save(dir);
      train(run, 2);
      EXPECT_TRUE(run.finish_save(/*wait=*/true).has_value());
    } else {
      run.save_checkpoint(dir);
    }
  }
  actors::TrainingConfig t = config(loader);
  const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(dir);
  EXPECT_EQ(meta.iteration, 5);
  actors::TrainingRun run(t, loader_at(t, meta.consumed_samples), nullptr);
  run.load_checkpoint(dir);
  EXPECT_EQ(run.iteration(), 5);
  EXPECT_EQ(run.consumed_samples(), meta.consumed_samples);
  return train(run, 5);
}

class ExactResume : public ::testing::TestWithParam<Layout> {};

TEST_P(ExactResume, BitIdenticalLosses) {
  const Layout l = GetParam();
  TempDir dir("ckpt_exact");
  const std::vector<IterationStats> want = straight(l);
  for (bool async : {false, true}) {
    const std::vector<IterationStats> got = resumed(l, l, dir / (async ? "async" : "sync"), async);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].loss, want[i].loss) << (async ? "async" : "sync") << " iteration " << i + 6;
      EXPECT_EQ(got[i].grad_norm, want[i].grad_norm) << (async ? "async" : "sync") << " iteration " << i + 6;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ExactResume,
                         ::testing::Values(Layout{}, Layout{.P = 2, .V = 2}, Layout{.T = 2, .sp = true},
                                           Layout{.D = 2, .dist = true}, Layout{2, 2, 2, true, true},
                                           Layout{.P = 2, .V = 2, .zbv = true}),
                         [](const auto& info) { return name_of(info.param); });

struct Reshard {
  Layout saver, loader;
};

class Resharding : public ::testing::TestWithParam<Reshard> {};

TEST_P(Resharding, LossesOfTheUninterruptedRun) {
  const Reshard r = GetParam();
  TempDir dir("ckpt_reshard");
  const std::vector<IterationStats> want = straight(r.saver);
  const std::vector<IterationStats> got = resumed(r.saver, r.loader, dir / "ckpt");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(rel(got[i].loss, want[i].loss), 1e-5) << "iteration " << i + 6;
}

std::vector<Reshard> reshards() {
  const Layout tp2pp2{.T = 2, .P = 2}, tp2pp2dp2{2, 2, 2, true, true};
  std::vector<Reshard> out;
  for (const Layout& saver : {tp2pp2, tp2pp2dp2})
    for (const Layout& loader :
         {Layout{}, Layout{.P = 4}, Layout{.T = 4}, Layout{.D = 4, .dist = true}, Layout{.D = 4}})
      out.push_back({saver, loader});
  // Qwen3's q/k norm weights (replicated, saved once) from TP2 x PP2 x DP2 onto one device and PP4.
  const Layout qwen3{2, 2, 2, true, true, 1, true};
  out.push_back({qwen3, Layout{.qwen3 = true}});
  out.push_back({qwen3, Layout{.P = 4, .qwen3 = true}});
  // ZB-V's V (the LM head's chunk on stage 0) onto one device, and a TP2 x PP2 checkpoint into it.
  out.push_back({Layout{.P = 2, .V = 2, .zbv = true}, Layout{}});
  out.push_back({tp2pp2, Layout{.P = 2, .V = 2, .zbv = true}});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Resharding, ::testing::ValuesIn(reshards()), [](const auto& info) {
  return name_of(info.param.saver) + "_to_" + name_of(info.param.loader);
});

// The checkpoint holds each tensor once, by global name and unpadded shape, whatever the layout.
TEST(CheckpointLayout, TensorsAreGlobal) {
  TempDir dir("ckpt_global");
  const Layout l{2, 2, 2, true, true};
  actors::TrainingConfig t = config(l);
  actors::TrainingRun run(t, loader_at(t, 0), nullptr);
  train(run, 1);
  run.save_checkpoint(dir / "c");
  const CheckpointReader r = CheckpointReader::open(dir / "c");
  const ParamLayout whole(t.model, ChunkSpec::whole_model());
  EXPECT_EQ(r.names().size(), 3 * whole.params().size());
  EXPECT_EQ(r.info("embedding.word_embeddings.weight").shape, (Shape{t.model.vocab_size, t.model.hidden_size}));
  EXPECT_EQ(r.info(actors::kExpAvgSqPrefix + "decoder.layers.7.mlp.linear_fc1.weight").shape,
            (Shape{t.model.ffn(), t.model.hidden_size}));
  // The weights equal the run's own gathered ones.
  const Tensor saved = actors::read_checkpoint_params(dir / "c", whole);
  const Tensor live = run.gather_weights();
  for (const ParamInfo& p : whole.params()) {
    const int64_t n =
        p.name == "embedding.word_embeddings.weight" ? t.model.vocab_size * t.model.hidden_size : p.numel();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(saved.data_as<float>()[p.offset + i], live.data_as<float>()[p.offset + i]) << p.name << " at " << i;
  }
}

TEST(CheckpointErrors, OtherModelIsRefusedNamingTheField) {
  TempDir dir("ckpt_other");
  {
    actors::TrainingConfig t = config({});
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    run.save_checkpoint(dir / "c");
  }
  actors::TrainingConfig t = config({});
  t.model.num_layers = 4;
  actors::TrainingRun run(t, loader_at(t, 0), nullptr);
  try {
    run.load_checkpoint(dir / "c");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model_config.num_layers"), std::string::npos) << e.what();
  }
}

// Saves one iteration under TP2 (two shard files), damages it with `damage`, and expects the
// load to fail with a message holding `expect`, the checkpoint's files unchanged.
void expect_load_error(const std::function<void(const fs::path& iter_dir)>& damage, const std::string& expect) {
  TempDir dir("ckpt_damaged");
  const Layout l{.T = 2};
  actors::TrainingConfig t = config(l);
  std::string iter_dir;
  {
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    train(run, 1);
    iter_dir = run.save_checkpoint(dir / "c").dir;
  }
  damage(iter_dir);
  std::map<std::string, uintmax_t> before;
  for (const auto& e : fs::directory_iterator(iter_dir)) before[e.path().string()] = e.file_size();
  try {
    // Opening checks files and sizes; loading, the checksums of the shards it reads.
    const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(dir / "c");
    actors::TrainingRun run(t, loader_at(t, meta.consumed_samples), nullptr);
    run.load_checkpoint(dir / "c");
    FAIL() << "expected an error containing '" << expect << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
  }
  std::map<std::string, uintmax_t> after;
  for (const auto& e : fs::directory_iterator(iter_dir)) after[e.path().string()] = e.file_size();
  EXPECT_EQ(before, after);
}

TEST(CheckpointErrors, CorruptShardNamesFileAndTensor) {
  expect_load_error(
      [](const fs::path& d) {
        std::fstream f(d / checkpoint_shard_file_name(1), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(100);
        const char junk[4] = {1, 2, 3, 4};
        f.write(junk, 4);
      },
      "checksum mismatch in checkpoint shard file '");
}

TEST(CheckpointErrors, TruncatedShardNamesFile) {
  expect_load_error([](const fs::path& d) { fs::resize_file(d / checkpoint_shard_file_name(1), 1000); },
                    str_cat(checkpoint_shard_file_name(1), "' has 1000 bytes"));
}

TEST(CheckpointErrors, MissingShardNamesFile) {
  expect_load_error([](const fs::path& d) { fs::remove(d / checkpoint_shard_file_name(0)); },
                    str_cat(checkpoint_shard_file_name(0), "' is missing"));
}

TEST(CheckpointErrors, MissingCheckpointIsAnError) {
  TempDir dir("ckpt_missing");
  EXPECT_THROW(actors::TrainingRun::read_checkpoint_metadata(dir / "nothing"), Error);
}

// Without --no-load-rng the dropout streams continue from the checkpoint's seed; with it, from
// the new run's (another seed: other losses). --finetune starts at iteration 0 from the weights.
TEST(CheckpointOptions, RngAndFinetune) {
  TempDir dir("ckpt_rng");
  const std::vector<IterationStats> want = straight({});
  {
    actors::TrainingConfig t = config({});
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    train(run, 5);
    run.save_checkpoint(dir / "c");
  }
  auto losses_after_load = [&](actors::LoadOptions opts, uint64_t seed, int64_t consumed) {
    actors::TrainingConfig t = config({});
    t.seed = seed;
    actors::TrainingRun run(t, loader_at(t, consumed), nullptr);
    run.load_checkpoint(dir / "c", opts);
    const int64_t it = run.iteration();
    return std::make_pair(it, train(run, 5));
  };
  const int64_t consumed = actors::TrainingRun::read_checkpoint_metadata(dir / "c").consumed_samples;
  const auto [it_rng, with_rng] = losses_after_load({}, 999, consumed);
  const auto [it_norng, without_rng] = losses_after_load({.rng = false}, 999, consumed);
  EXPECT_EQ(it_rng, 5);
  EXPECT_EQ(it_norng, 5);
  EXPECT_EQ(with_rng[0].loss, want[0].loss);     // the checkpoint's seed
  EXPECT_NE(without_rng[0].loss, want[0].loss);  // other dropout masks
  const auto [it_ft, finetuned] = losses_after_load({.finetune = true}, 4321, 0);
  EXPECT_EQ(it_ft, 0);
  EXPECT_NE(finetuned[0].loss, want[0].loss);  // iteration 1's data and LR, from the trained weights
}

// The LR schedule's position is the optimizer's successful steps, as Megatron keeps it with its
// optimizer state: a resumed run goes on where the straight run was; without the optimizer state
// (--no-load-optim) the schedule starts again from its beginning (the warmup's initial lr 0).
TEST(CheckpointOptions, TheLrScheduleResumesWithTheOptimizer) {
  TempDir dir("ckpt_lr");
  const std::vector<IterationStats> want = straight({});
  const actors::TrainingConfig t = config({});
  {
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    train(run, 5);
    run.save_checkpoint(dir / "c");
  }
  const int64_t consumed = actors::TrainingRun::read_checkpoint_metadata(dir / "c").consumed_samples;
  auto after_load = [&](actors::LoadOptions opts) {
    actors::TrainingRun run(t, loader_at(t, consumed), nullptr);
    run.load_checkpoint(dir / "c", opts);
    return train(run, 2);
  };
  const std::vector<IterationStats> resumed_run = after_load({});
  EXPECT_EQ(resumed_run[0].lr, want[0].lr);
  EXPECT_EQ(resumed_run[0].lr, t.lr.at(5));  // iteration 6, after 5 successful steps
  EXPECT_EQ(resumed_run[1].lr, t.lr.at(6));
  const std::vector<IterationStats> fresh_optimizer = after_load({.optimizer = false});
  EXPECT_EQ(fresh_optimizer[0].lr, 0.0);
  EXPECT_EQ(fresh_optimizer[1].lr, t.lr.at(1));
  EXPECT_EQ(fresh_optimizer[1].next_lr, t.lr.at(2));
}

}  // namespace
}  // namespace troupe::test
