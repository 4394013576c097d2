// Logging: levels parse (or are refused by name), lines go to the right stream with the
// documented prefixes, and nothing below the level is written.
#include <gtest/gtest.h>

#include "base/log.hpp"

namespace troupe {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override {
    set_log_level(LogLevel::info);
    set_log_process(0, 1);
  }
};

TEST_F(LogTest, LevelsParseAndUnknownOnesAreRefusedByName) {
  EXPECT_EQ(parse_log_level("trace"), LogLevel::trace);
  EXPECT_EQ(parse_log_level("debug"), LogLevel::debug);
  EXPECT_EQ(parse_log_level("info"), LogLevel::info);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::warning);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::warning);
  EXPECT_EQ(parse_log_level("error"), LogLevel::error);
  try {
    parse_log_level("verbose");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--log-level verbose"), std::string::npos) << e.what();
  }
}

TEST_F(LogTest, InfoGoesToStdoutWithItsRoleAndWarningsToStderr) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  logger("monitor").info("publishing on ", "tcp://127.0.0.1:5555");
  logger("train").warning("the actor system did not shut down");
  logger("train").debug("hidden at level info");
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "monitor: publishing on tcp://127.0.0.1:5555\n");
  EXPECT_EQ(err, "troupe: warning: the actor system did not shut down\n");
}

TEST_F(LogTest, TheLevelHidesWhatIsBelowIt) {
  set_log_level(LogLevel::error);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  logger("train").info("hidden");
  logger("train").warning("hidden");
  logger("train").error("shown");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "troupe: error: shown\n");
  set_log_level(LogLevel::trace);
  testing::internal::CaptureStderr();
  logger("fabric").trace("group tp0 of 2");
  logger("fabric").debug("channel 0 -> 1");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "[trace] fabric: group tp0 of 2\n[debug] fabric: channel 0 -> 1\n");
}

TEST_F(LogTest, UnderSeveralProcessesEveryLineNamesRankAndRole) {
  set_log_process(3, 4);
  set_log_level(LogLevel::debug);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  logger("monitor").info("publishing on tcp://127.0.0.1:5555");
  logger("train").warning("late");
  logger("stage").debug("forward mb 0");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "[rank 3 monitor] publishing on tcp://127.0.0.1:5555\n");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "[rank 3 train] warning: late\n[rank 3 stage] debug: forward mb 0\n");
}

TEST_F(LogTest, OneLoggerPerRole) {
  EXPECT_EQ(&logger("serve"), &logger("serve"));
  EXPECT_NE(&logger("serve"), &logger("train"));
  EXPECT_EQ(logger("serve").role(), "serve");
}

}  // namespace
}  // namespace troupe
