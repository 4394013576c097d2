// Megatron-LM launch scripts run under `troupe train` (issue 24):
// - examples/: the GPT-3, Llama 3 and Mixtral (four experts over two pipeline stages) scripts
//   train for two iterations on CPU devices;
// - a flag of the Megatron table that changes nothing prints a note, one that would change the
//   math is an error naming it, and docs/megatron-flags.md is the table's current text;
// - integer flags are range-checked when parsed (exit 2, naming the flag);
// - --train-samples gives samples / global batch iterations, and the schedule's flags follow it;
// - --exit-duration-in-mins saves and stops.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

// `bash examples/<script> TROUPE_BINARY`, two iterations.
TroupeExit run_example(const std::string& script, const std::string& name) {
  ::setenv("TROUPE_EXAMPLE_ITERS", "2", 1);
  return run_to_exit({"bash", source_path("examples/" + script)}, {}, "megatron_" + name, 300s);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MegatronExamples, Gpt3TrainsTwoIterations) {
  const TroupeExit o = run_example("gpt3/train_gpt3_tiny.sh", "gpt3");
  EXPECT_EQ(o.code, std::optional<int>(0)) << o.output;
  EXPECT_TRUE(contains(o.output, "iteration        2/       2")) << o.output;
  EXPECT_TRUE(contains(o.output, "note: --attention-backend auto has no effect here")) << o.output;
}

TEST(MegatronExamples, Llama3TrainsTwoIterationsCountedInSamples) {
  const TroupeExit o = run_example("llama/train_llama3_tiny.sh", "llama3");
  EXPECT_EQ(o.code, std::optional<int>(0)) << o.output;
  EXPECT_TRUE(contains(o.output, "global batch 4, 2 iterations")) << o.output;  // --train-samples 8
  EXPECT_TRUE(contains(o.output, "iteration        2/       2")) << o.output;
  EXPECT_TRUE(contains(o.output, "note: --calculate-per-token-loss has no effect here")) << o.output;
}

TEST(MegatronExamples, MixtralTrainsTwoIterations) {
  const TroupeExit o = run_example("mixtral/train_mixtral_tiny.sh", "mixtral");
  EXPECT_EQ(o.code, std::optional<int>(0)) << o.output;
  EXPECT_TRUE(contains(o.output, "mixture of experts: 4 experts, top-2")) << o.output;
  EXPECT_TRUE(contains(o.output, "iteration        2/       2")) << o.output;
  EXPECT_TRUE(contains(o.output, "| load_balancing_loss: ")) << o.output;
  EXPECT_TRUE(contains(o.output, "note: --moe-grouped-gemm has no effect here")) << o.output;
}

TEST(MegatronFlags, DocIsTheTablesText) {
  const TroupeExit o = run_to_exit({"train", "--list-megatron-flags"}, "megatron_list", 120s);
  ASSERT_EQ(o.code, std::optional<int>(0)) << o.output;
  EXPECT_EQ(read_file(source_path("docs/megatron-flags.md")), o.output)
      << "docs/megatron-flags.md is out of date: run `troupe train --list-megatron-flags > docs/megatron-flags.md`";
}

std::vector<std::string> tiny(const std::vector<std::string>& extra) { return tiny_train_args(1, extra); }

// tiny_train_args without its batch and iteration flags: --train-samples and the batch sizes.
std::vector<std::string> tiny_in_samples(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {
      "train",        "--mock-data", "--model",      "gpt2-tiny", "--device",       "cpu", "--vocab-size", "100",
      "--seq-length", "32",          "--eval-iters", "0",         "--log-interval", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(MegatronFlags, UnimplementedMathIsAnErrorNamingTheFlag) {
  for (const std::vector<std::string>& flag : std::vector<std::vector<std::string>>{{"--decoupled-lr", "1e-4"},
                                                                                    {"--fp8-param-gather"},
                                                                                    {"--apply-query-key-layer-scaling"},
                                                                                    {"--cp-comm-type", "a2a"},
                                                                                    {"--rotary-percent", "0.5"},
                                                                                    {"--ckpt-format", "torch_dist"}}) {
    const TroupeExit o = run_to_exit(tiny(flag), "megatron_refused", 120s);
    EXPECT_EQ(o.code, std::optional<int>(1)) << o.output;
    EXPECT_TRUE(contains(o.output, "error: " + flag[0])) << o.output;
    EXPECT_FALSE(contains(o.output, "iteration ")) << o.output;
  }
}

TEST(MegatronFlags, NoEffectFlagsPrintANoteAndTrain) {
  const TroupeExit o = run_to_exit(tiny({"--use-flash-attn", "--transformer-impl", "local", "--rotary-percent", "1",
                                         "--ckpt-format", "troupe", "--wandb-project", "p", "--exit-signal-handler"}),
                                   "megatron_no_effect", 120s);
  EXPECT_EQ(o.code, std::optional<int>(0)) << o.output;
  for (const char* note :
       {"note: --use-flash-attn has no effect", "note: --transformer-impl local has no effect",
        "note: --rotary-percent 1 has no effect", "note: --ckpt-format troupe has no effect",
        "note: --wandb-project p has no effect here: Weights & Biases", "note: --exit-signal-handler has no effect"})
    EXPECT_TRUE(contains(o.output, note)) << note << "\n" << o.output;
}

TEST(MegatronFlags, IntegerFlagsAreRangeCheckedNamingTheFlag) {
  for (const std::vector<std::string>& flag : std::vector<std::vector<std::string>>{{"--num-layers", "0"},
                                                                                    {"--train-iters", "-5"},
                                                                                    {"--micro-batch-size", "0"},
                                                                                    {"--seq-length", "-1"},
                                                                                    {"--eval-iters", "-1"},
                                                                                    {"--save-interval", "-2"},
                                                                                    {"--vocab-size", "-3"}}) {
    std::vector<std::string> args = {"train", "--mock-data", "--device", "cpu"};
    args.insert(args.end(), flag.begin(), flag.end());
    const TroupeExit o = run_to_exit(args, "megatron_range", 120s);
    EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
    EXPECT_TRUE(contains(o.output, flag[0] + ": got " + flag[1])) << o.output;
  }
}

TEST(MegatronFlags, TrainSamplesAndWsd) {
  // 10 samples of 3: 3 iterations (the remainder is not trained, as Megatron). WSD anneals over
  // the last iteration's 3 samples, linearly: iteration 3 ends the decay at --min-lr.
  const TroupeExit o = run_to_exit(
      tiny_in_samples({"--train-samples", "10", "--global-batch-size", "3", "--micro-batch-size", "1", "--lr", "1e-3",
                       "--min-lr", "1e-4", "--lr-decay-style", "WSD", "--lr-wsd-decay-style", "linear",
                       "--lr-wsd-decay-samples", "3", "--lr-decay-samples", "9"}),
      "megatron_samples", 120s);
  EXPECT_EQ(o.code, std::optional<int>(0)) << o.output;
  EXPECT_TRUE(contains(o.output, "3 iterations")) << o.output;
  EXPECT_TRUE(contains(o.output,
                       "iteration        2/       3 | consumed samples:            6 | "
                       "elapsed time"))
      << o.output;
  EXPECT_TRUE(contains(o.output, "learning rate: 1.000000E-03")) << o.output;  // iteration 2: flat
  EXPECT_TRUE(contains(o.output, "learning rate: 1.000000E-04")) << o.output;  // iteration 3: annealed
  const TroupeExit mixed =
      run_to_exit(tiny_in_samples({"--train-samples", "10", "--lr-decay-iters", "5"}), "megatron_mixed", 120s);
  EXPECT_EQ(mixed.code, std::optional<int>(1)) << mixed.output;
  EXPECT_TRUE(contains(mixed.output, "--train-samples counts the schedule in samples")) << mixed.output;
}

// --exit-duration-in-mins: the first iteration past the time stops the run, after saving.
TEST(MegatronFlags, ExitDurationSavesAndStops) {
  TempDir dir("megatron_exit_duration");
  Troupe t(tiny_train_args(100000, {"--exit-duration-in-mins", "0.0001", "--save", dir / "ckpt"}), dir / "out.txt");
  EXPECT_EQ(t.wait(120s), std::optional<int>(0)) << t.output();
  const std::string out = t.output();
  EXPECT_TRUE(contains(out, "exiting at iteration 1: --exit-duration-in-mins 0.0001 has passed")) << out;
  EXPECT_TRUE(contains(out, "successfully saved checkpoint from iteration 1")) << out;
}

}  // namespace
}  // namespace troupe::test
