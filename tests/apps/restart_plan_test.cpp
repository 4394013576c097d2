// What `troupe train --auto-restart` restarts a failed training process with
// (apps/train/restart_plan.hpp): only checkpoints written since the supervisor started count,
// the newest intact one of them is resumed (--load SAVE --ckpt-step K replacing the first
// start's checkpoint flags, wherever and however they were written), a broken newer one of this
// run adds --overwrite, and with no checkpoint of this run the first start's flags come back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "apps/train/restart_plan.hpp"
#include "storage/checkpoint_format.hpp"
#include "storage/checkpoint_writer.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;
using apps::has_option;
using apps::plan_restart;
using apps::RestartPlan;
using apps::SaveDirSnapshot;
using apps::snapshot_save_dir;
using apps::without_options;

using Words = std::vector<std::string>;

// The options of `troupe train` the plan reads or replaces, as the command declares them.
struct TrainFlags {
  CLI::App app{"test"};
  CLI::App* train = app.add_subcommand("train");
  std::string save, load, prompt;
  int64_t ckpt_step = 0, restarts = 0;
  int devices = 0;
  bool finetune = false, overwrite = false, no_load_optim = false, no_load_rng = false;
  std::vector<std::string> data_path;

  TrainFlags() {
    train->add_option("--save", save);
    train->add_option("--load", load);
    train->add_option("--ckpt-step", ckpt_step);
    train->add_option("--auto-restart", restarts);
    train->add_option("--devices,--cpu-devices", devices);
    train->add_option("--data-path", data_path);
    train->add_option("--prompt", prompt);
    train->add_flag("--finetune", finetune);
    train->add_flag("--overwrite", overwrite);
    train->add_flag("--no-load-optim", no_load_optim);
    train->add_flag("--no-load-rng", no_load_rng);
  }
};

// A small committed checkpoint of iteration `it` in `root` (the writer also moves the tracker).
void save(const std::string& root, int64_t it) {
  CheckpointWriter w(root, it);
  const Tensor t = random_normal({4, 8}, uint64_t(it));
  w.add_rows(0, "w", t.shape(), 0, t);
  CheckpointMetadata m;
  m.iteration = it;
  m.consumed_samples = it;
  m.model_config = {{"num_layers", 1}};
  m.parallel_layout = {{"tp", 1}};
  m.rng_state = {{"seed", 1}};
  w.commit(m);
}

// Iteration `it` of `root` with its shard file cut short: complete but not intact.
void break_checkpoint(const std::string& root, int64_t it) {
  const fs::path shard = fs::path(root) / checkpoint_iteration_dir_name(it) / checkpoint_shard_file_name(0);
  fs::resize_file(shard, fs::file_size(shard) / 2);
}

// A save that never committed (a process killed while saving).
void save_incomplete(const std::string& root, int64_t it) {
  CheckpointWriter w(root, it);
  const Tensor t = random_normal({4, 8}, 1);
  w.add_rows(0, "w", t.shape(), 0, t);
}

TEST(RestartPlan, WithoutOptionsDropsEveryFormOfTheNamedOptions) {
  TrainFlags f;
  const Words args = {
      "troupe",     "train",           "--load",        "a", "--data-path",      "1",           "x",    "--load=b",
      "--finetune", "--prompt=--load", "--cpu-devices", "4", "--auto-restart=2", "--log-level", "debug"};
  // "--prompt=--load" is --prompt's value; --cpu-devices is --devices; --log-level is no train flag.
  EXPECT_EQ(without_options(args, *f.train, {"--load", "--finetune", "--devices", "--auto-restart"}),
            (Words{"troupe", "train", "--data-path", "1", "x", "--prompt=--load", "--log-level", "debug"}));
  EXPECT_TRUE(has_option(args, *f.train, "--devices"));
  EXPECT_FALSE(has_option(args, *f.train, "--overwrite"));
  EXPECT_THROW(without_options(args, *f.train, {"--no-such-flag"}), Error);
}

TEST(RestartPlan, ResumesTheNewestIntactCheckpointOfThisRunOnly) {
  TempDir dir("restart_plan");
  const std::string root = dir / "ckpt";
  save(root, 10);  // another run's, there before (the first start has --overwrite)
  const SaveDirSnapshot before = snapshot_save_dir(root);
  EXPECT_TRUE(before.held_checkpoints);
  TrainFlags f;
  const Words first = {"troupe",           "train",       "--save", root,         "--load",
                       dir / "pretrained", "--ckpt-step", "7",      "--finetune", "--overwrite",
                       "--no-load-rng",    "--prompt",    "hi"};
  {
    const RestartPlan p = plan_restart(first, *f.train, before, false);
    EXPECT_EQ(p.iteration, std::nullopt) << "iteration 10 is not this run's";
    EXPECT_EQ(p.args, first);
  }
  save(root, 2);
  save(root, 4);
  save_incomplete(root, 6);
  const Words resume = {"troupe", "train", "--save", root, "--prompt", "hi", "--load", root, "--ckpt-step"};
  {
    const RestartPlan p = plan_restart(first, *f.train, before, false);
    EXPECT_EQ(p.iteration, std::optional<int64_t>(4));
    Words want = resume;
    want.emplace_back("4");
    EXPECT_EQ(p.args, want);
    EXPECT_NE(p.note.find("resuming from iteration 4 of " + root), std::string::npos) << p.note;
  }
  // Iteration 4, which the tracker names, broken: 2, and --overwrite to rewind the tracker to it.
  break_checkpoint(root, 4);
  const RestartPlan p = plan_restart(first, *f.train, before, /*no_save_optim=*/true);
  EXPECT_EQ(p.iteration, std::optional<int64_t>(2));
  Words want = resume;
  want.insert(want.end(), {"2", "--no-load-optim", "--overwrite"});
  EXPECT_EQ(p.args, want);
  EXPECT_NE(p.note.find("the tracker names iteration 4, which is not intact"), std::string::npos) << p.note;
}

TEST(RestartPlan, WithoutACheckpointTheFirstStartsFlagsComeBack) {
  TempDir dir("restart_plan_none");
  const std::string root = dir / "ckpt";
  const SaveDirSnapshot empty = snapshot_save_dir(root);  // not there yet
  EXPECT_FALSE(empty.held_checkpoints);
  TrainFlags f;
  const Words first = {"troupe", "train", "--save", root};
  EXPECT_EQ(plan_restart(first, *f.train, empty, false).args, first);
  // Only this run's incomplete save is there: the first start's flags would now be refused.
  save_incomplete(root, 2);
  const RestartPlan p = plan_restart(first, *f.train, empty, false);
  EXPECT_EQ(p.iteration, std::nullopt);
  EXPECT_EQ(p.args, (Words{"troupe", "train", "--save", root, "--overwrite"}));
  // A directory that held checkpoints before (another run's, or this one's to resume): never.
  EXPECT_EQ(plan_restart(first, *f.train, snapshot_save_dir(root), false).args, first);
}

}  // namespace
}  // namespace troupe::test
