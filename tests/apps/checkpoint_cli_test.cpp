// Checkpoints from the `troupe` command line, as separate processes:
// - crash safety: `troupe train --save-interval 1` killed with SIGKILL at random points (most of
//   its time is spent saving) always leaves the tracker naming a complete checkpoint whose every
//   shard verifies, and the next run resumes from it;
// - --async-save, --most-recent-k and --exit-interval; the tokenizer files saved with the weights;
// - `troupe convert --to hf` and `--from hf` round-trip the weights bit for bit; `--dtype bf16` rounds them.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/train/checkpoint_shards.hpp"
#include "kernels/half.hpp"
#include "model/config.hpp"
#include "model/hf/hf_checkpoint.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/checkpoint_writer.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::vector<std::string> train_args(const std::string& save, int64_t iters, std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--save", save});
  return tiny_train_args(iters, extra);
}

// Reads every tensor of the tracker's checkpoint (each shard's checksum is verified on first use).
int64_t verify_latest(const std::string& root) {
  const CheckpointReader r = CheckpointReader::open(root);
  for (const std::string& name : r.names()) r.read(name);
  return r.iteration();
}

TEST(CheckpointCli, KilledMidSaveLeavesTheLastCompleteCheckpoint) {
  TempDir dir("ckpt_kill");
  const std::string root = dir / "ckpt";
  std::mt19937 rng(2026);
  int mid_save = 0;
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<std::string> extra = {"--save-interval", "1", "--most-recent-k", "2"};
    if (trial > 0) extra.insert(extra.end(), {"--load", root});
    Troupe t(train_args(root, 100000, extra), dir / ("out" + std::to_string(trial) + ".txt"));
    t.await_output("successfully saved checkpoint from iteration", 60s);
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 700));
    t.signal(SIGKILL);
    ASSERT_EQ(t.wait(20s), 128 + SIGKILL);
    if (trial > 0) {
      EXPECT_NE(t.output().find("successfully loaded checkpoint"), std::string::npos) << t.output().substr(0, 1500);
    }
    const int64_t latest = read_checkpoint_tracker(root);
    EXPECT_EQ(verify_latest(root), latest) << "trial " << trial;
    // A newer directory without metadata.json: the kill landed inside a save.
    if (fs::exists(fs::path(root) / checkpoint_iteration_dir_name(latest + 1)) &&
        !fs::exists(fs::path(root) / checkpoint_iteration_dir_name(latest + 1) / kCheckpointMetadataName))
      ++mid_save;
  }
  std::printf("kills inside a save: %d of 6\n", mid_save);
  EXPECT_GE(mid_save, 1) << "no kill landed inside a save; the test did not test what it says";
}

TEST(CheckpointCli, AsyncSaveRetentionExitIntervalAndConvert) {
  TempDir dir("ckpt_cli");
  const std::string root = dir / "ckpt";
  {
    Troupe t(
        train_args(root, 20, {"--save-interval", "2", "--async-save", "--most-recent-k", "2", "--exit-interval", "7"}),
        dir / "a.txt");
    ASSERT_EQ(t.wait(120s), 0) << t.output();
    EXPECT_NE(t.output().find("exiting at iteration 7"), std::string::npos) << t.output();
  }
  // Saved at 2, 4, 6 (asynchronously) and 7 (on exit); the newest two kept.
  EXPECT_EQ(read_checkpoint_tracker(root), 7);
  EXPECT_FALSE(fs::exists(fs::path(root) / checkpoint_iteration_dir_name(4)));
  EXPECT_TRUE(fs::exists(fs::path(root) / checkpoint_iteration_dir_name(6) / kCheckpointMetadataName));
  EXPECT_TRUE(fs::exists(fs::path(root) / checkpoint_iteration_dir_name(7) / "vocab.json"));
  EXPECT_TRUE(fs::exists(fs::path(root) / checkpoint_iteration_dir_name(7) / "merges.txt"));
  {
    Troupe t(train_args(root, 9, {"--load", root}), dir / "b.txt");
    ASSERT_EQ(t.wait(120s), 0) << t.output();
    EXPECT_NE(t.output().find("iteration        8/       9"), std::string::npos) << t.output();
  }
  EXPECT_EQ(read_checkpoint_tracker(root), 9);

  // Export to HF and back: the same weights, bit for bit, and the tokenizer files along.
  const std::string hf = dir / "hf", back = dir / "back";
  {
    Troupe t({"convert", "--to", "hf", "--load", root, "--output", hf}, dir / "c.txt");
    ASSERT_EQ(t.wait(60s), 0) << t.output();
  }
  EXPECT_TRUE(fs::exists(fs::path(hf) / "config.json"));
  EXPECT_TRUE(fs::exists(fs::path(hf) / "vocab.json"));
  {
    Troupe t({"convert", "--from", "hf", "--input", hf, "--save", back}, dir / "d.txt");
    ASSERT_EQ(t.wait(60s), 0) << t.output();
  }
  const CheckpointReader r = CheckpointReader::open(root);
  const ParamLayout layout(gpt_config_from_json(r.metadata().model_config), ChunkSpec::whole_model());
  const Tensor a = actors::read_checkpoint_params(root, layout), b = actors::read_checkpoint_params(back, layout);
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  // --dtype bf16: BF16 tensors, config.json's torch_dtype, each value rounded to nearest even;
  // a progress line per tensor.
  {
    const std::string hf16 = dir / "hf-bf16";
    Troupe t({"convert", "--to", "hf", "--load", root, "--output", hf16, "--dtype", "bf16"}, dir / "g.txt");
    ASSERT_EQ(t.wait(60s), 0) << t.output();
    EXPECT_NE(t.output().find("[1/"), std::string::npos) << t.output();
    EXPECT_EQ(nlohmann::json::parse(std::ifstream(fs::path(hf16) / "config.json"))["torch_dtype"], "bfloat16");
    const Tensor c = load_hf_weights(hf16, layout, hf_arch_for(layout.config()));
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(c.at(i), round_to_bf16(a.at(i))) << i;
  }
  // Refusals: nothing overwritten, clear messages.
  {
    Troupe t({"convert", "--to", "hf", "--load", root, "--output", hf}, dir / "e.txt");
    EXPECT_NE(t.wait(60s), 0);
    EXPECT_NE(t.output().find("refusing to overwrite"), std::string::npos) << t.output();
  }
  {
    Troupe t({"convert", "--to", "hf", "--from", "hf"}, dir / "f.txt");
    EXPECT_NE(t.wait(60s), 0);
    EXPECT_NE(t.output().find("exactly one of"), std::string::npos) << t.output();
  }
}

// lm loss of each logged iteration in a `troupe train` output.
std::map<int64_t, double> logged_losses(const std::string& out) {
  std::map<int64_t, double> losses;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    const size_t it = line.find("iteration "), loss = line.find("lm loss: ");
    if (it == std::string::npos || loss == std::string::npos) continue;
    losses[std::stoll(line.substr(it + 10))] = std::stod(line.substr(loss + 9));
  }
  return losses;
}

// Two processes (mpirun) save one checkpoint under TP2 x DP2 with the distributed optimizer,
// each writing its ranks' shard files, process 0 committing; one process loads it on one device
// and continues with the losses of an uninterrupted single-device run.
TEST(CheckpointCli, SavedByTwoProcessesLoadsIntoOne) {
  const std::optional<std::vector<std::string>> mpirun = mpirun_launcher(2);
  if (!mpirun) GTEST_SKIP() << "no mpirun";
  TempDir dir("ckpt_mpi");
  const std::string root = dir / "ckpt";
  auto args = [&](int64_t iters, std::vector<std::string> extra) {
    std::vector<std::string> a = train_args(root, iters, extra);
    // Global batch 4: two microbatches on each of the two data-parallel ranks.
    *(std::find(a.begin(), a.end(), "--global-batch-size") + 1) = "4";
    return a;
  };
  std::map<int64_t, double> straight;
  {
    Troupe t(args(6, {"--save-interval", "0", "--devices", "1"}), dir / "straight.txt");
    ASSERT_EQ(t.wait(120s), 0) << t.output();
    straight = logged_losses(t.output());
  }
  fs::remove_all(root);
  {
    Troupe t(*mpirun,
             args(6, {"--tensor-model-parallel-size", "2", "--devices", "2", "--use-distributed-optimizer",
                      "--async-save", "--exit-interval", "3"}),
             dir / "mpi.txt");
    ASSERT_EQ(t.wait(180s), 0) << t.output();
  }
  EXPECT_EQ(read_checkpoint_tracker(root), 3);
  const CheckpointReader r = CheckpointReader::open(root);
  EXPECT_EQ(r.metadata().parallel_layout.value("processes", 0), 2);
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_TRUE(fs::exists(fs::path(r.dir()) / checkpoint_shard_file_name(rank))) << "rank " << rank;
  Troupe t(args(6, {"--devices", "1", "--load", root}), dir / "resumed.txt");
  ASSERT_EQ(t.wait(120s), 0) << t.output();
  const std::map<int64_t, double> resumed = logged_losses(t.output());
  for (int64_t it = 4; it <= 6; ++it) {
    ASSERT_TRUE(straight.count(it) && resumed.count(it)) << "iteration " << it << " not logged";
    EXPECT_NEAR(resumed.at(it), straight.at(it), 1e-5 * straight.at(it)) << "iteration " << it;
  }
}

}  // namespace
}  // namespace troupe::test
