// A run whose model goes non-finite stops instead of succeeding: the default check
// (TrainingConfig::check_for_nan) names the iteration, stage and microbatch of a NaN loss;
// without it, skipped iterations are counted and max_consecutive_skipped in a row end the
// run; a checkpoint of inf weights is refused before anything is written, the tracker still
// naming the last good one.
#include <filesystem>

#include "storage/checkpoint_format.hpp"
#include "storage/checkpoint_writer.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;

// init_method_std 1e30 overflows in the first attention: the loss is NaN from iteration 1.
actors::TrainingConfig overflowing_config(int P) {
  actors::TrainingConfig config = tiny_config(false, P, 1);
  config.model.init_method_std = 1e30f;
  return config;
}

std::string train_error(actors::TrainingRun& run, int iterations) {
  try {
    for (int i = 0; i < iterations; ++i) run.train_iteration();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Divergence, TheDefaultCheckNamesTheIterationStageAndMicrobatch) {
  const actors::TrainingConfig config = overflowing_config(2);
  ASSERT_TRUE(config.check_for_nan) << "Megatron's default: on";
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  const std::string what = train_error(run, 3);
  EXPECT_NE(what.find("stage 1 failed in forward of microbatch 0 (chunk 0): the loss of iteration 1 is NaN"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("--no-check-for-nan-in-loss-and-grad"), std::string::npos) << what;
  EXPECT_THROW(run.train_iteration(), Error) << "the run stays failed";
}

TEST(Divergence, WithoutTheCheckConsecutiveSkippedIterationsAreBounded) {
  actors::TrainingConfig config = overflowing_config(2);
  config.check_for_nan = false;
  config.max_consecutive_skipped = 3;
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  for (int i = 1; i <= 2; ++i) {
    const IterationStats s = run.train_iteration();
    EXPECT_TRUE(s.skipped) << "iteration " << i;
    EXPECT_TRUE(std::isnan(s.loss)) << "iteration " << i;
  }
  const std::string what = train_error(run, 1);
  EXPECT_NE(what.find("iteration 3: 3 iterations in a row were skipped for inf/NaN gradients "
                      "(--max-consecutive-skipped-iterations 3)"),
            std::string::npos)
      << what;
  EXPECT_THROW(run.train_iteration(), Error) << "the run stays failed";
}

// lr 3e38 is a finite float, but Adam's first step (lr / (1 - beta1)) overflows: after one
// iteration with a finite loss and gradients the weights are inf.
TEST(Divergence, ACheckpointOfInfWeightsIsRefusedBeforeAnythingIsWritten) {
  TempDir dir("divergence_save");
  const std::string root = dir / "ckpt";
  actors::TrainingConfig config = tiny_config(false, 2, 1);
  {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    run.train_iteration();
    run.save_checkpoint(root);
  }
  ASSERT_EQ(read_checkpoint_tracker(root), 1);
  config.lr = {.lr = 3e38, .min_lr = 3e38, .warmup_iters = 0, .decay_iters = 20, .style = LrDecayStyle::constant};
  config.check_for_nan = false;  // iteration 2's NaN loss is skipped, not an error
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  const IterationStats first = run.train_iteration();
  ASSERT_FALSE(first.skipped);
  ASSERT_TRUE(std::isfinite(first.loss));
  run.train_iteration();
  std::string what;
  try {
    run.save_checkpoint(root);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("saving checkpoint iteration 2"), std::string::npos) << what;
  EXPECT_NE(what.find("the previous checkpoint stays the latest"), std::string::npos) << what;
  EXPECT_NE(what.find("tensor '"), std::string::npos) << what;
  EXPECT_TRUE(what.find("' holds inf") != std::string::npos || what.find("' holds NaN") != std::string::npos) << what;
  EXPECT_EQ(read_checkpoint_tracker(root), 1);
  EXPECT_FALSE(fs::exists(fs::path(root) / checkpoint_iteration_dir_name(2))) << "the save of inf weights began";
}

}  // namespace
}  // namespace troupe::test
