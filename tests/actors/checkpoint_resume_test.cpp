// Synchronous checkpoints of a TrainingRun on CPU devices: a run saved after 5 iterations and
// resumed in a new run (same or another pipeline layout) continues with the losses of an
// uninterrupted run; a checkpoint of another model, or a corrupt one, is a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "tests/actors/pipeline_test_util.hpp"
#include "storage/checkpoint_format.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

actors::TrainingConfig config(int P) {
  actors::TrainingConfig t = tiny_config(/*llama=*/false, P, /*V=*/1, /*microbatches=*/4);
  t.model.num_layers = 4;
  return t;
}

std::unique_ptr<DataLoader> loader_at(const actors::TrainingConfig& t, int64_t consumed) {
  return std::make_unique<DataLoader>(
      tiny_data(t.model), DataLoaderOptions{.micro_batch_size = t.micro_batch_size, .consumed_samples = consumed});
}

std::vector<double> train(actors::TrainingRun& run, int iters) {
  std::vector<double> losses;
  for (int i = 0; i < iters; ++i) losses.push_back(run.train_iteration().loss);
  return losses;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// Losses of iterations 6..10 after save at 5 under P_save and load under P_load.
std::vector<double> resumed(int p_save, int p_load, const std::string& dir) {
  {
    actors::TrainingConfig t = config(p_save);
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    train(run, 5);
    run.save_checkpoint(dir);
  }
  actors::TrainingConfig t = config(p_load);
  const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(dir);
  EXPECT_EQ(meta.iteration, 5);
  actors::TrainingRun run(t, loader_at(t, meta.consumed_samples), nullptr);
  run.load_checkpoint(dir);
  EXPECT_EQ(run.iteration(), 5);
  EXPECT_EQ(run.consumed_samples(), meta.consumed_samples);
  return train(run, 5);
}

std::vector<double> straight(int P) {
  actors::TrainingConfig t = config(P);
  actors::TrainingRun run(t, loader_at(t, 0), nullptr);
  const std::vector<double> all = train(run, 10);
  return {all.begin() + 5, all.end()};
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(rel(got[i], want[i]), tol) << "iteration " << i + 6;
}

TEST(CheckpointResume, SameLayoutIsExact) {
  TempDir dir("troupe_ckpt_same");
  expect_same(resumed(1, 1, dir.str()), straight(1), 1e-6);
}

TEST(CheckpointResume, PipelineTwoSavedLoadsIntoOne) {
  TempDir dir("troupe_ckpt_p2p1");
  expect_same(resumed(2, 1, dir.str()), straight(2), 1e-5);
}

TEST(CheckpointResume, PipelineOneSavedLoadsIntoTwo) {
  TempDir dir("troupe_ckpt_p1p2");
  expect_same(resumed(1, 2, dir.str()), straight(1), 1e-5);
}

TEST(CheckpointResume, OtherModelIsRefusedNamingTheField) {
  TempDir dir("troupe_ckpt_other");
  {
    actors::TrainingConfig t = config(1);
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    run.save_checkpoint(dir.str());
  }
  actors::TrainingConfig t = config(1);
  t.model.num_layers = 8;
  actors::TrainingRun run(t, loader_at(t, 0), nullptr);
  try {
    run.load_checkpoint(dir.str());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model_config.num_layers"), std::string::npos) << e.what();
  }
}

TEST(CheckpointResume, CorruptShardIsAnError) {
  TempDir dir("troupe_ckpt_corrupt");
  actors::TrainingConfig t = config(1);
  std::string iter_dir;
  {
    actors::TrainingRun run(t, loader_at(t, 0), nullptr);
    train(run, 1);
    iter_dir = run.save_checkpoint(dir.str());
  }
  {
    std::fstream f(fs::path(iter_dir) / checkpoint_shard_file_name(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    const char junk[4] = {1, 2, 3, 4};
    f.write(junk, 4);
  }
  const CheckpointMetadata meta = actors::TrainingRun::read_checkpoint_metadata(dir.str());
  actors::TrainingRun run(t, loader_at(t, meta.consumed_samples), nullptr);
  EXPECT_THROW(run.load_checkpoint(dir.str()), Error);
}

TEST(CheckpointResume, MissingCheckpointIsAnError) {
  TempDir dir("troupe_ckpt_missing");
  EXPECT_THROW(actors::TrainingRun::read_checkpoint_metadata(dir.str()), Error);
}

}  // namespace
}  // namespace troupe::test
