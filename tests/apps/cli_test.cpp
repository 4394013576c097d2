// The command line as a finished tool: --version, suggestions for typos, usage errors exit 2,
// one-sentence errors with the internals (source file, line, expression) in the debug log only,
// and a prompt with spaces that is not quoted is an error, not several prompts.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

TEST(Cli, VersionNamesTheReleaseAndTheCommit) {
  const TroupeExit o = run_to_exit({"--version"}, "cli_version");
  EXPECT_EQ(o.code, std::optional<int>(0)) << o.output;
  EXPECT_NE(o.output.find("troupe 0."), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("(commit "), std::string::npos) << o.output;
}

TEST(Cli, TyposGetASuggestionAndExitTwo) {
  TroupeExit o = run_to_exit({"trian"}, "cli_typo_command");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
  EXPECT_NE(o.output.find("unknown command 'trian'; did you mean 'train'?"), std::string::npos) << o.output;

  o = run_to_exit({"train", "--lr-warmup-iter", "5"}, "cli_typo_flag");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
  EXPECT_NE(o.output.find("unknown flag '--lr-warmup-iter' for 'troupe train'; did you mean '--lr-warmup-iters'?"),
            std::string::npos)
      << o.output;

  o = run_to_exit({"train", "--micro-batch-size", "x"}, "cli_bad_value");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;

  o = run_to_exit({}, "cli_nothing");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
  EXPECT_NE(o.output.find("Usage: troupe"), std::string::npos) << o.output;
}

TEST(Cli, AnUnquotedPromptIsAnErrorNotThreePrompts) {
  const TroupeExit o = run_to_exit({"generate", "--hf", "nowhere", "--prompt", "Call", "me", "Ishmael"}, "cli_prompt");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
  EXPECT_NE(o.output.find("me"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("no such directory"), std::string::npos) << "it ran: " << o.output;
}

TEST(Cli, ErrorsAreOneSentenceAndTheInternalsGoToTheDebugLog) {
  const std::vector<std::string> bad = {
      "train",         "--mock-data", "--vocab-size",          "64", "--num-layers",  "1",
      "--hidden-size", "30",          "--num-attention-heads", "4",  "--train-iters", "1"};
  TroupeExit o = run_to_exit(bad, "cli_error_info");
  EXPECT_EQ(o.code, std::optional<int>(1)) << o.output;
  EXPECT_NE(o.output.find("troupe: error: --hidden-size 30 is not divisible by --num-attention-heads 4"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("failed at"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find(".cpp:"), std::string::npos) << o.output;

  std::vector<std::string> debug = bad;
  debug.insert(debug.end(), {"--log-level", "debug"});
  o = run_to_exit(debug, "cli_error_debug");
  EXPECT_NE(o.output.find("[debug] check: --hidden-size 30"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("model/config.cpp:"), std::string::npos) << o.output;
}

}  // namespace
}  // namespace troupe::test
