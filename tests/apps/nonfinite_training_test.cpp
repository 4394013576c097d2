// `troupe train` runs whose weights go non-finite fail, as separate processes:
// - --check-for-nan-in-loss-and-grad (the default) stops a diverging run at the first NaN loss
//   with an error naming the iteration and the flag that turns the check off;
// - without it, NaN iterations are skipped and counted, a NaN validation loss is printed, and
//   --max-consecutive-skipped-iterations in a row end the run with an error;
// - a checkpoint of non-finite weights is never written nor reported saved, and the tracker
//   keeps naming the last good one;
// - inf/NaN float flags and --adam-eps 0 are refused when parsed, naming the flag;
// - a normal run is unaffected.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "storage/checkpoint_format.hpp"
#include "storage/checkpoint_reader.hpp"
#include "storage/checkpoint_writer.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A GPT of 0.9M parameters on random tokens of a 512-token vocabulary, on one CPU device: a
// few milliseconds per iteration. --lr 1000 makes it diverge: its loss is NaN from iteration 8.
// No validation unless `extra` asks for it.
std::vector<std::string> args(int64_t iters, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train",
                                "--mock-data",
                                "--model",
                                "gpt2-tiny",
                                "--device",
                                "cpu",
                                "--vocab-size",
                                "512",
                                "--seq-length",
                                "32",
                                "--micro-batch-size",
                                "1",
                                "--global-batch-size",
                                "1",
                                "--train-iters",
                                std::to_string(iters),
                                "--log-interval",
                                "1"};
  if (std::find(extra.begin(), extra.end(), "--eval-iters") == extra.end()) a.insert(a.end(), {"--eval-iters", "0"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

fs::path tracker(const std::string& root) { return fs::path(root) / kCheckpointTrackerName; }

TEST(NonFiniteTraining, TheDefaultCheckStopsADivergingRun) {
  TempDir dir("nan_check");
  const std::string root = dir / "ckpt";
  Troupe t(args(50, {"--lr", "1000", "--save", root}), dir / "out.txt");
  ASSERT_EQ(t.wait(120s), 1) << t.output();
  const std::string out = t.output();
  EXPECT_TRUE(contains(out, "the loss of iteration ")) << out;
  EXPECT_TRUE(contains(out, " is NaN")) << out;
  EXPECT_TRUE(contains(out, "failed in forward of microbatch 0")) << out;
  EXPECT_TRUE(contains(out, "pass --no-check-for-nan-in-loss-and-grad")) << out;
  EXPECT_FALSE(contains(out, "iteration       50/      50")) << "the run went on to the end";
  EXPECT_FALSE(contains(out, "successfully saved")) << out;
  EXPECT_FALSE(fs::exists(tracker(root))) << out;
}

TEST(NonFiniteTraining, WithoutTheCheckConsecutiveSkippedIterationsEndTheRun) {
  TempDir dir("nan_skips");
  const std::string root = dir / "ckpt";
  Troupe t(args(50, {"--lr", "1000", "--save", root, "--no-check-for-nan-in-loss-and-grad",
                     "--max-consecutive-skipped-iterations", "3"}),
           dir / "out.txt");
  ASSERT_EQ(t.wait(120s), 1) << t.output();
  const std::string out = t.output();
  EXPECT_TRUE(contains(out,
                       "3 iterations in a row were skipped for inf/NaN gradients "
                       "(--max-consecutive-skipped-iterations 3)"))
      << out;
  // Skipped iterations with a NaN loss are counted in the log line (a window of one iteration).
  EXPECT_TRUE(contains(out,
                       "lm loss: NAN | loss scale: 1.0 | grad norm: nan | number of skipped iterations:   1 | "
                       "number of nan iterations:   1 |"))
      << out;
  EXPECT_FALSE(contains(out, "successfully saved")) << out;
  EXPECT_FALSE(fs::exists(tracker(root))) << out;
}

// Both off: the run goes on to the end, and its final validation loss, NaN, is printed.
TEST(NonFiniteTraining, ANaNValidationLossIsPrinted) {
  TempDir dir("nan_valid");
  Troupe t(args(12, {"--lr", "1000", "--no-check-for-nan-in-loss-and-grad", "--max-consecutive-skipped-iterations", "0",
                     "--eval-iters", "1", "--eval-interval", "1000"}),
           dir / "out.txt");
  ASSERT_EQ(t.wait(120s), 0) << t.output();
  EXPECT_TRUE(contains(t.output(), "validation loss at the end of training | lm loss value: NAN | lm loss PPL: NAN"))
      << t.output();
}

// --lr 3e38 is a finite float, but Adam's first step (lr / (1 - beta1)) overflows: the weights
// are inf after the resumed run's first iteration, whose loss and gradients were finite.
TEST(NonFiniteTraining, ACheckpointOfNonFiniteWeightsIsNotWritten) {
  TempDir dir("nan_save");
  const std::string root = dir / "ckpt";
  {
    Troupe t(args(2, {"--save", root}), dir / "a.txt");
    ASSERT_EQ(t.wait(120s), 0) << t.output();
  }
  ASSERT_EQ(read_checkpoint_tracker(root), 2);
  const std::string tracker_text = read_file(tracker(root).string());
  Troupe t(
      args(6, {"--load", root, "--save", root, "--save-interval", "1", "--lr", "3e38", "--lr-decay-style", "constant"}),
      dir / "b.txt");
  ASSERT_EQ(t.wait(120s), 1) << t.output();
  const std::string out = t.output();
  EXPECT_TRUE(contains(out, "saving checkpoint iteration 3 to ")) << out;
  EXPECT_TRUE(contains(out, "(the previous checkpoint stays the latest)")) << out;
  EXPECT_TRUE(contains(out, "holds inf") || contains(out, "holds NaN")) << out;
  EXPECT_TRUE(contains(out, "tensor '")) << out;
  EXPECT_FALSE(contains(out, "successfully saved")) << out;
  EXPECT_EQ(read_file(tracker(root).string()), tracker_text);
  EXPECT_FALSE(fs::exists(fs::path(root) / checkpoint_iteration_dir_name(3))) << "a save of inf weights began";
  // The last good checkpoint is whole: every tensor reads (checksums verified).
  const CheckpointReader r = CheckpointReader::open(root);
  for (const std::string& name : r.names()) r.read(name);
  EXPECT_EQ(r.iteration(), 2);
}

TEST(NonFiniteTraining, NonFiniteFloatFlagsAreRefused) {
  TempDir dir("nan_flags");
  const std::vector<std::pair<std::string, std::string>> bad = {{"--lr", "inf"},
                                                                {"--lr", "nan"},
                                                                {"--lr", "1e39"},
                                                                {"--min-lr", "inf"},
                                                                {"--adam-eps", "0"},
                                                                {"--adam-eps", "-1e-8"},
                                                                {"--adam-eps", "inf"},
                                                                {"--adam-beta1", "nan"},
                                                                {"--adam-beta2", "-inf"},
                                                                {"--weight-decay", "inf"},
                                                                {"--clip-grad", "nan"},
                                                                {"--init-method-std", "inf"},
                                                                {"--hidden-dropout", "nan"},
                                                                {"--attention-dropout", "inf"},
                                                                {"--lr-warmup-init", "nan"}};
  int i = 0;
  for (const auto& [flag, value] : bad) {
    Troupe t(args(3, {flag, value}), dir / ("out" + std::to_string(i++) + ".txt"));
    const std::optional<int> code = t.wait(30s);
    ASSERT_TRUE(code.has_value()) << flag << " " << value << ": still running";
    EXPECT_NE(*code, 0) << flag << " " << value << ": " << t.output();
    EXPECT_TRUE(contains(t.output(), flag + ": got " + value)) << t.output();
    EXPECT_FALSE(contains(t.output(), "iteration        1/")) << flag << " " << value << ": training started";
  }
}

TEST(NonFiniteTraining, ANormalRunIsUnaffected) {
  TempDir dir("nan_normal");
  const std::string root = dir / "ckpt";
  Troupe t(args(4, {"--save", root, "--check-for-nan-in-loss-and-grad", "--max-consecutive-skipped-iterations", "1",
                    "--eval-iters", "1", "--eval-interval", "2"}),
           dir / "out.txt");
  ASSERT_EQ(t.wait(120s), 0) << t.output();
  const std::string out = t.output();
  EXPECT_TRUE(contains(out, "iteration        4/       4")) << out;
  EXPECT_TRUE(contains(out, "number of skipped iterations:   0 | number of nan iterations:   0 |")) << out;
  EXPECT_FALSE(contains(out, "NAN")) << out;
  EXPECT_TRUE(contains(out, "successfully saved checkpoint from iteration 4")) << out;
  EXPECT_EQ(read_checkpoint_tracker(root), 4);
}

}  // namespace
}  // namespace troupe::test
