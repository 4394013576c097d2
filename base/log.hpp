// Logging: one logger per role (train, stage, fabric, serve, monitor, checkpoint, ...) over
// spdlog, with one level for the process (`--log-level`). Diagnostics go to stderr: warnings as
// "troupe: warning: ...", errors as "troupe: error: ...", debug and trace lines tagged with their
// role; under several processes every line also names the rank that wrote it. A command's own
// output (Megatron's iteration line, generated text, summaries) is not logging: it stays on
// stdout, unchanged.
//
//   const troupe::Logger& log = troupe::logger("checkpoint");
//   log.debug("shard ", rank, " durable in ", seconds, " s");   // only at --log-level debug
//   log.warning("after the failure, the actor system did not shut down");
//
// spdlog stays behind this header (Debian's spdlog is the compiled build with an external fmt).
#pragma once

#include <string>
#include <string_view>

#include "base/check.hpp"

namespace troupe {

enum class LogLevel { trace, debug, info, warning, error };

// "trace", "debug", "info", "warning" (or "warn"), "error"; anything else throws naming the
// value and the accepted ones.
LogLevel parse_log_level(std::string_view name);
const char* log_level_name(LogLevel level);

// The process-wide level (default: info) and, for runs of several processes, this process's
// rank (a prefix "[rank R] " on every line when size > 1).
void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_process(int rank, int size);

class Logger {
 public:
  explicit Logger(std::string role);

  bool enabled(LogLevel level) const { return level >= log_level(); }

  template <typename... Args>
  void trace(const Args&... args) const {
    if (enabled(LogLevel::trace)) write(LogLevel::trace, str_cat(args...));
  }
  template <typename... Args>
  void debug(const Args&... args) const {
    if (enabled(LogLevel::debug)) write(LogLevel::debug, str_cat(args...));
  }
  template <typename... Args>
  void info(const Args&... args) const {
    if (enabled(LogLevel::info)) write(LogLevel::info, str_cat(args...));
  }
  template <typename... Args>
  void warning(const Args&... args) const {
    if (enabled(LogLevel::warning)) write(LogLevel::warning, str_cat(args...));
  }
  template <typename... Args>
  void error(const Args&... args) const {
    if (enabled(LogLevel::error)) write(LogLevel::error, str_cat(args...));
  }

  const std::string& role() const { return role_; }

 private:
  void write(LogLevel level, const std::string& message) const;
  std::string role_;
};

// The logger of a role, made on first use; the same object for every caller.
const Logger& logger(const std::string& role);

}  // namespace troupe
