// `troupe completion bash|zsh` (issue 24): the bash script, run in bash with COMP_WORDS and
// COMP_CWORD set as bash sets them, completes commands, flags, a flag's choices and file names;
// every flag of every command the CLI11 definitions hold completes (nobody keeps a list). zsh is
// not installed here, so its script is checked as text: a function per command, a spec per flag
// with its description and choices, and quotes that close.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

// The app troupe's main() builds, for the names of its commands and flags.
struct TroupeApp {
  CLI::App app{"troupe", "troupe"};
  apps::CommandRunner run;
  TroupeApp() {
    apps::add_completion_command(app, run);
    apps::add_convert_command(app, run);
    apps::add_generate_command(app, run);
    apps::add_monitor_command(app, run);
    apps::add_preprocess_command(app, run);
    apps::add_replay_command(app, run);
    apps::add_serve_command(app, run);
    apps::add_train_command(app, run);
  }
};

// Completions, one case a line: "troupe train --micro-b" -> what COMPREPLY holds, space-separated.
std::map<std::string, std::string> bash_complete(const std::vector<std::vector<std::string>>& lines,
                                                 const TempDir& dir) {
  std::ofstream driver(dir / "driver.sh");
  driver << "source <(\"$1\" completion bash) || exit 3\n"
            "complete_words() {\n"
            "  COMP_WORDS=(\"$@\"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()\n"
            "  _troupe_complete\n"
            "  printf '%s|%s\\n' \"$*\" \"${COMPREPLY[*]}\"\n"
            "}\n";
  for (const std::vector<std::string>& words : lines) {
    driver << "complete_words";
    for (const std::string& w : words) driver << " '" << w << "'";
    driver << "\n";
  }
  driver.close();
  Troupe bash({"bash", dir / "driver.sh"}, {}, dir / "out.txt");  // troupe's path is $1
  EXPECT_EQ(bash.wait(60s), std::optional<int>(0)) << bash.output();
  std::map<std::string, std::string> replies;
  std::istringstream in(bash.output());
  for (std::string line; std::getline(in, line);)
    if (const size_t bar = line.find('|'); bar != std::string::npos)
      replies[line.substr(0, bar)] = line.substr(bar + 1);
  return replies;
}

std::vector<std::string> words_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool has_word(const std::string& text, const std::string& word) {
  for (const std::string& w : words_of(text))
    if (w == word) return true;
  return false;
}

TEST(Completion, BashCompletesCommandsFlagsChoicesAndFiles) {
  TempDir dir("completion_bash");
  std::ofstream(dir / "trace_file.msgpack") << "x";
  const std::string prefix = dir / "trace_f";
  const std::map<std::string, std::string> r =
      bash_complete({{"troupe", "tr"},
                     {"troupe", ""},
                     {"troupe", "train", "--micro-b"},
                     {"troupe", "--log-level", "debug", "train", "--lr-decay-s"},
                     {"troupe", "train", "--lr-decay-style", ""},
                     {"troupe", "train", "--lr-decay-style", "=", "inv"},
                     {"troupe", "convert", "--dtype", "b"},
                     {"troupe", "serve", "--dtype", ""},
                     {"troupe", "completion", ""},
                     {"troupe", "replay", prefix},
                     {"troupe", "train", "--load", prefix},
                     {"troupe", "train", "--micro-batch-size", ""}},
                    dir);
  ASSERT_EQ(r.size(), 12u) << "a case printed nothing";
  EXPECT_EQ(r.at("troupe tr"), "train");
  for (const char* command : {"completion", "convert", "generate", "monitor", "preprocess", "replay", "serve", "train"})
    EXPECT_TRUE(has_word(r.at("troupe "), command)) << command << " in: " << r.at("troupe ");
  EXPECT_EQ(r.at("troupe train --micro-b"), "--micro-batch-size");
  EXPECT_TRUE(has_word(r.at("troupe --log-level debug train --lr-decay-s"), "--lr-decay-style"));
  EXPECT_EQ(r.at("troupe train --lr-decay-style "), "constant linear cosine inverse-square-root WSD");
  EXPECT_EQ(r.at("troupe train --lr-decay-style = inv"), "inverse-square-root");
  EXPECT_EQ(r.at("troupe convert --dtype b"), "bf16");
  EXPECT_EQ(r.at("troupe serve --dtype "), "bf16 f16 f32");
  EXPECT_EQ(r.at("troupe completion "), "bash zsh");
  EXPECT_EQ(r.at("troupe replay " + prefix), dir / "trace_file.msgpack");  // CLI::ExistingFile positional
  EXPECT_EQ(r.at("troupe train --load " + prefix), dir / "trace_file.msgpack");
  EXPECT_EQ(r.at("troupe train --micro-batch-size "), "") << "a number has nothing to complete";
}

TEST(Completion, BashOffersEveryFlagOfEveryCommand) {
  TroupeApp troupe;
  std::vector<std::vector<std::string>> lines;
  for (const CLI::App* sub : troupe.app.get_subcommands({})) lines.push_back({"troupe", sub->get_name(), "--"});
  TempDir dir("completion_all");
  const std::map<std::string, std::string> r = bash_complete(lines, dir);
  size_t checked = 0;
  for (const CLI::App* sub : troupe.app.get_subcommands({})) {
    const std::string key = "troupe " + sub->get_name() + " --";
    ASSERT_TRUE(r.count(key)) << key;
    for (const CLI::Option* o : sub->get_options())
      for (const std::string& name : o->get_lnames()) {
        EXPECT_TRUE(has_word(r.at(key), "--" + name)) << "--" << name << " of troupe " << sub->get_name();
        ++checked;
      }
  }
  EXPECT_GT(checked, 250u) << "fewer flags than troupe has";
}

TEST(Completion, ZshScriptHasAFunctionPerCommandAndASpecPerFlag) {
  TempDir dir("completion_zsh");
  Troupe t({"completion", "zsh"}, dir / "zsh.txt");
  ASSERT_EQ(t.wait(60s), std::optional<int>(0)) << t.output();
  const std::string script = t.output();
  EXPECT_EQ(script.rfind("#compdef troupe\n", 0), 0u) << script.substr(0, 200);
  TroupeApp troupe;
  for (const CLI::App* sub : troupe.app.get_subcommands({})) {
    const std::string fn = "_troupe_" + sub->get_name();
    EXPECT_NE(script.find(fn + "() {\n  _arguments"), std::string::npos) << fn;
    EXPECT_NE(script.find("        " + sub->get_name() + ") " + fn + " ;;"), std::string::npos) << fn;
    EXPECT_NE(script.find("'" + sub->get_name() + ":"), std::string::npos) << sub->get_name() << " not described";
    for (const CLI::Option* o : sub->get_options())
      for (const std::string& name : o->get_lnames())
        EXPECT_NE(script.find("'--" + name + (o->get_expected_max() == 0 ? "[" : "=[")), std::string::npos)
            << "--" << name << " of troupe " << sub->get_name();
  }
  EXPECT_NE(
      script.find("'--lr-decay-style=[constant, linear, cosine, inverse-square-root or WSD]:TEXT:(constant linear "
                  "cosine inverse-square-root WSD)'"),
      std::string::npos);
  EXPECT_NE(script.find("'--dtype=[--to: dtype of the written tensors"), std::string::npos);
  EXPECT_NE(script.find(":TEXT:(bf16 f16 f32)'"), std::string::npos);
  EXPECT_NE(script.find("'--load=[Troupe checkpoint directory (its newest checkpoint)]:TEXT:_files'"),
            std::string::npos);
  EXPECT_NE(script.find("'1:SHELL:(bash zsh)'"), std::string::npos);
  // Every line's single quotes close (a quote inside a description is written '\'').
  std::istringstream lines(script);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (line.rfind('#', 0) == 0) continue;
    size_t quotes = 0;
    for (size_t at = line.find('\''); at != std::string::npos; at = line.find('\'', at + 1)) ++quotes;
    for (size_t at = line.find("'\\''"); at != std::string::npos; at = line.find("'\\''", at + 4)) quotes -= 3;
    EXPECT_EQ(quotes % 2, 0u) << "line " << number << ": " << line;
  }
}

}  // namespace
}  // namespace troupe::test
