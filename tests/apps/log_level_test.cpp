// `--log-level` from the command line: debug lines appear only when asked for, tagged with
// their role; a bad level is refused by name before anything runs.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> tp2_train(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--tensor-model-parallel-size", "2"});
  return tiny_train_args(1, extra);
}

const char* const kGroupLine = "[debug] fabric: group 'the tensor-parallel group of stage 0, data rank 0': 2 members";

TEST(LogLevel, DebugShowsTheFabricsGroupsAndInfoDoesNot) {
  TempDir dir("log_level");
  Troupe debug(tp2_train({"--log-level", "debug"}), dir / "debug.txt");
  ASSERT_EQ(debug.wait(120s), std::optional<int>(0)) << debug.output();
  EXPECT_NE(debug.output().find(kGroupLine), std::string::npos) << debug.output();
  EXPECT_NE(debug.output().find(" iteration        1/       1 |"), std::string::npos) << debug.output();

  Troupe info(tp2_train({}), dir / "info.txt");
  ASSERT_EQ(info.wait(120s), std::optional<int>(0)) << info.output();
  EXPECT_EQ(info.output().find("[debug]"), std::string::npos) << info.output();
  EXPECT_NE(info.output().find(" iteration        1/       1 |"), std::string::npos) << info.output();
}

TEST(LogLevel, AnUnknownLevelIsRefusedByName) {
  TempDir dir("log_level_bad");
  Troupe t(tp2_train({"--log-level", "loud"}), dir / "out.txt");
  EXPECT_EQ(t.wait(60s), std::optional<int>(2));
  EXPECT_NE(t.output().find("troupe: error: --log-level loud: not a level (trace, debug, info, warning, error)"),
            std::string::npos)
      << t.output();
  EXPECT_EQ(t.output().find("iteration"), std::string::npos) << t.output();
}

}  // namespace
}  // namespace troupe::test
