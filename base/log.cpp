#include "base/log.hpp"

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

namespace troupe {
namespace {

std::atomic<LogLevel> g_level{LogLevel::info};
std::atomic<int> g_rank{0};
std::atomic<int> g_size{1};

// Info lines on stdout, in order with the command's own output (the same FILE); everything
// else on stderr. Each line is flushed: logging is rare, and a watcher (a test, `tail -f`)
// must see a line when it is written.
class SplitSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::FILE* out = msg.level == spdlog::level::info ? stdout : stderr;
    std::fwrite(msg.payload.data(), 1, msg.payload.size(), out);
    std::fputc('\n', out);
    std::fflush(out);
  }
  void flush_() override {
    std::fflush(stdout);
    std::fflush(stderr);
  }
};

spdlog::logger& sink_logger() {
  static spdlog::logger logger("troupe", std::make_shared<SplitSink>());
  logger.set_level(spdlog::level::trace);  // Logger filters by g_level first
  return logger;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warning:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

LogLevel parse_log_level(std::string_view name) {
  if (name == "trace") return LogLevel::trace;
  if (name == "debug") return LogLevel::debug;
  if (name == "info") return LogLevel::info;
  if (name == "warning" || name == "warn") return LogLevel::warning;
  if (name == "error") return LogLevel::error;
  TROUPE_FAIL("--log-level ", name, ": not a level (trace, debug, info, warning, error)");
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::trace:
      return "trace";
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warning:
      return "warning";
    case LogLevel::error:
      return "error";
  }
  return "info";
}

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void set_log_process(int rank, int size) {
  g_rank = rank;
  g_size = size;
}

Logger::Logger(std::string role) : role_(std::move(role)) {}

// One process: "ROLE: message" (info), "troupe: warning: message", "troupe: error: message",
// "[debug] ROLE: message". Several: "[rank R ROLE] message", "[rank R ROLE] warning: message", ...
void Logger::write(LogLevel level, const std::string& message) const {
  std::string line;
  if (g_size > 1) {
    line = str_cat("[rank ", g_rank.load(), " ", role_, "] ");
    if (level != LogLevel::info) line += str_cat(log_level_name(level), ": ");
  } else if (level == LogLevel::info) {
    line = role_ + ": ";
  } else if (level == LogLevel::warning || level == LogLevel::error) {
    line = str_cat("troupe: ", log_level_name(level), ": ");
  } else {
    line = str_cat("[", log_level_name(level), "] ", role_, ": ");
  }
  line += message;
  sink_logger().log(to_spdlog(level), "{}", line);
}

const Logger& logger(const std::string& role) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Logger>> loggers;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loggers[role];
  if (!slot) slot = std::make_unique<Logger>(role);
  return *slot;
}

}  // namespace troupe
