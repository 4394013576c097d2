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

struct Outcome {
  std::optional<int> code;
  std::string output;
};

Outcome run(const std::vector<std::string>& args, const std::string& name) {
  TempDir dir("cli_" + name);
  Troupe t(args, dir / "out.txt");
  Outcome o;
  o.code = t.wait(60s);
  o.output = t.output();
  return o;
}

TEST(Cli, VersionNamesTheReleaseAndTheCommit) {
  const Outcome o = run({"--version"}, "version");
  EXPECT_EQ(o.code, std::optional<int>(0)) << o.output;
  EXPECT_NE(o.output.find("troupe 0."), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("(commit "), std::string::npos) << o.output;
}

TEST(Cli, TyposGetASuggestionAndExitTwo) {
  Outcome o = run({"trian"}, "typo_command");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
  EXPECT_NE(o.output.find("unknown command 'trian'; did you mean 'train'?"), std::string::npos) << o.output;

  o = run({"train", "--lr-warmup-iter", "5"}, "typo_flag");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
  EXPECT_NE(o.output.find("unknown flag '--lr-warmup-iter' for 'troupe train'; did you mean '--lr-warmup-iters'?"),
            std::string::npos)
      << o.output;

  o = run({"train", "--micro-batch-size", "x"}, "bad_value");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;

  o = run({}, "nothing");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
  EXPECT_NE(o.output.find("Usage: troupe"), std::string::npos) << o.output;
}

TEST(Cli, AnUnquotedPromptIsAnErrorNotThreePrompts) {
  const Outcome o = run({"generate", "--hf", "nowhere", "--prompt", "Call", "me", "Ishmael"}, "prompt");
  EXPECT_EQ(o.code, std::optional<int>(2)) << o.output;
  EXPECT_NE(o.output.find("me"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("no such directory"), std::string::npos) << "it ran: " << o.output;
}

TEST(Cli, ErrorsAreOneSentenceAndTheInternalsGoToTheDebugLog) {
  const std::vector<std::string> bad = {
      "train",         "--mock-data", "--vocab-size",          "64", "--num-layers",  "1",
      "--hidden-size", "30",          "--num-attention-heads", "4",  "--train-iters", "1"};
  Outcome o = run(bad, "error_info");
  EXPECT_EQ(o.code, std::optional<int>(1)) << o.output;
  EXPECT_NE(o.output.find("troupe: error: --hidden-size 30 is not divisible by --num-attention-heads 4"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("failed at"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find(".cpp:"), std::string::npos) << o.output;

  std::vector<std::string> debug = bad;
  debug.insert(debug.end(), {"--log-level", "debug"});
  o = run(debug, "error_debug");
  EXPECT_NE(o.output.find("[debug] check: --hidden-size 30"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("model/config.cpp:"), std::string::npos) << o.output;
}

}  // namespace
}  // namespace troupe::test
