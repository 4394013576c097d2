// A failing stage stops the whole run with an error naming the stage and the op, quickly,
// and the run shuts down cleanly: an exception in an op, an op that never finishes (the
// watchdog), NaN activations with --check-for-nan, the data running out; bad layouts are
// clear errors before anything starts.
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using Clock = std::chrono::steady_clock;
using schedules::Op;
using schedules::OpKind;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string train_error(actors::TrainingRun& run) {
  try {
    for (int i = 0; i < 3; ++i) run.train_iteration();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StageFailure, ExceptionNamesStageAndOp) {
  for (const auto& [P, V] : {std::pair(4, 1), std::pair(2, 2)}) {
    actors::TrainingConfig config = tiny_config(false, P, V);
    const int bad_stage = P == 4 ? 2 : 1;
    config.before_op = [=](int stage, const Op& op) {
      if (stage == bad_stage && op == Op{OpKind::backward, 3, 0}) throw Error("injected fault");
    };
    const auto t0 = Clock::now();
    {
      actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
      const std::string what = train_error(run);
      const double took = seconds_since(t0);
      EXPECT_NE(what.find("stage " + std::to_string(bad_stage) + " failed in backward of microbatch 3 (chunk 0)"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("injected fault"), std::string::npos) << what;
      EXPECT_LT(took, 5.0);
      std::printf("P=%d V=%d: failed after %.2f s: %s\n", P, V, took, what.c_str());
      // The run stays failed.
      try {
        run.train_iteration();
        ADD_FAILURE() << "a failed run trained again";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
      }
    }
    EXPECT_LT(seconds_since(t0), 8.0) << "shutdown after a failure";
  }
}

// Under tensor parallelism the failing rank's partners wait inside a collective for it: the
// failure must reach them at once (the groups are aborted), not after --op-timeout.
TEST(StageFailure, OneTensorParallelRankFailingEndsTheRunAtOnce) {
  for (const int P : {1, 2}) {
    actors::TrainingConfig config = tiny_config(false, P, 1);
    config.parallel.tensor_size = 2;
    config.op_timeout = std::chrono::seconds(60);
    auto thrown = std::make_shared<std::atomic<bool>>(false);
    config.before_op = [=](int stage, const Op& op) {
      // Only the first of the stage's two tensor ranks to get here fails.
      if (stage == P - 1 && op == Op{OpKind::forward, 1, 0} && !thrown->exchange(true)) throw Error("injected fault");
    };
    const auto t0 = Clock::now();
    {
      actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
      const std::string what = train_error(run);
      EXPECT_NE(what.find("injected fault"), std::string::npos) << what;
      std::printf("TP=2 P=%d: failed after %.2f s: %s\n", P, seconds_since(t0), what.c_str());
    }
    EXPECT_LT(seconds_since(t0), 10.0) << "P " << P << ": the failure waited for the collective's timeout";
  }
}

TEST(StageFailure, SilentStageTimesOut) {
  actors::TrainingConfig config = tiny_config(true, 4, 1);
  config.op_timeout = std::chrono::milliseconds(300);
  config.before_op = [](int stage, const Op& op) {
    if (stage == 1 && op == Op{OpKind::forward, 2, 0}) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  };
  const auto t0 = Clock::now();
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  const std::string what = train_error(run);
  const double took = seconds_since(t0);
  EXPECT_NE(what.find("stage 1 failed in forward of microbatch 2 (chunk 0)"), std::string::npos) << what;
  EXPECT_NE(what.find("no answer"), std::string::npos) << what;
  EXPECT_LT(took, 2.0);
  std::printf("hung stage reported after %.2f s: %s\n", took, what.c_str());
}

TEST(StageFailure, NanActivationsWithCheckForNan) {
  actors::TrainingConfig config = tiny_config(false, 2, 1);
  config.model.init_method_std = 1e30f;  // overflows in the first attention
  config.check_for_nan_every_op = true;  // the debugging mode names the first op making a NaN
  actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
  const std::string what = train_error(run);
  EXPECT_NE(what.find("stage 0 failed in forward of microbatch 0 (chunk 0)"), std::string::npos) << what;
  EXPECT_NE(what.find("NaN"), std::string::npos) << what;
  std::printf("%s\n", what.c_str());
}

TEST(StageFailure, DataRunningOutIsAnError) {
  actors::TrainingConfig config = tiny_config(false, 2, 1);
  actors::TrainingRun run(config, loader(tiny_data(config.model, 20), config.micro_batch_size), nullptr);
  run.train_iteration();  // 16 of 20 samples
  const std::string what = train_error(run);
  EXPECT_NE(what.find("training data ran out"), std::string::npos) << what;
}

// Under tensor parallelism the vocabulary is padded to a multiple of 8 x TP (200 -> 208 here):
// ids 200..207 have rows, but they are padding and must be refused as at TP = 1, never trained.
TEST(StageFailure, TokenIdsPastTheVocabularyAreAnErrorInEveryLayout) {
  for (const int tp : {1, 2}) {
    actors::TrainingConfig config = tiny_config(false, 1, 1);
    config.parallel.tensor_size = tp;
    GptConfig wider = config.model;
    wider.vocab_size = 208;  // the data's tokenizer
    actors::TrainingRun run(config, loader(tiny_data(wider), config.micro_batch_size), nullptr);
    const std::string what = train_error(run);
    EXPECT_NE(what.find("is outside the model's vocabulary [0, 200)"), std::string::npos)
        << "TP " << tp << ": " << what;
  }
}

TEST(Layout, BadLayoutsAreClearErrors) {
  const auto error_of = [](const actors::TrainingConfig& config) -> std::string {
    try {
      actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  actors::TrainingConfig c = tiny_config(false, 4, 1);
  c.model.num_layers = 6;
  std::string what = error_of(c);
  EXPECT_NE(what.find("--num-layers (6)"), std::string::npos) << what;
  EXPECT_NE(what.find("--pipeline-model-parallel-size (4)"), std::string::npos) << what;

  c = tiny_config(false, 2, 3);  // 8 layers over 6 virtual stages
  what = error_of(c);
  EXPECT_NE(what.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos) << what;

  c = tiny_config(false, 4, 2, 6);  // interleaving: M = 6 is not a multiple of P = 4
  what = error_of(c);
  EXPECT_NE(what.find("interleaved"), std::string::npos) << what;
  EXPECT_NE(what.find("M = 6"), std::string::npos) << what;

  c = tiny_config(false, 2, 1);
  c.global_batch_size = 7;
  what = error_of(c);
  EXPECT_NE(what.find("--global-batch-size (7)"), std::string::npos) << what;
}

}  // namespace
}  // namespace troupe::test
