// The latest values of a run, as the monitor actor last published them, rendered for
// Prometheus (text exposition format 0.0.4: HELP and TYPE lines, then samples) and for a
// /health check. The monitor actor updates it; the HTTP server's threads read it.
//
//   MonitorMetrics metrics;
//   metrics.update(message);                    // any MonitorMessage
//   std::string text = metrics.prometheus_text();   // troupe_lm_loss 3.21 ...
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "actors/monitor/monitor_schema.hpp"

namespace troupe::actors {

class MonitorMetrics {
 public:
  void update(const MonitorMessage& message);
  // The publisher's counters (messages handed to ZeroMQ, refused, subscriptions seen).
  void set_publisher_counts(uint64_t sent, uint64_t refused, uint64_t subscriptions);

  std::string prometheus_text() const;
  // {"status": "starting" | "training" | "serving" | "ended", "iteration": N, ...}: 200 while the process lives.
  std::string health_json() const;

 private:
  mutable std::mutex mutex_;
  std::optional<MonitorHello> hello_;
  std::optional<MonitorIteration> iteration_;
  std::optional<MonitorValidation> validation_;
  std::optional<MonitorEnd> end_;
  int64_t iteration_unix_ms_ = 0;
  int64_t skipped_total_ = 0, nan_total_ = 0;                         // summed over the log windows
  std::optional<MonitorStages> stages_;                               // the latest traced iteration's breakdown
  std::optional<MonitorServing> serving_;                             // troupe serve's latest state
  std::map<std::pair<std::string, size_t>, int64_t> stage_ns_total_;  // (state, stage) -> ns, summed
  int64_t trace_events_ = 0, trace_dropped_ = 0;
  uint64_t sent_ = 0, refused_ = 0, subscriptions_ = 0;
};

// A double as Prometheus writes it: shortest round-trip form, NaN, +Inf, -Inf.
std::string prometheus_number(double v);
// A label value with \, " and newline escaped.
std::string prometheus_label(const std::string& v);

}  // namespace troupe::actors
