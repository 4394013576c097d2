// The recent past of a run, for the dashboard page (actors/monitor/dashboard_page.hpp): the latest
// iteration records (loss, throughput, memory), validations, per-stage time breakdowns and
// the pipeline timeline (stage ops) of the latest traced iterations, as one JSON document at
// /api/history. The monitor actor updates it; the HTTP server's threads read it.
//
//   MonitorHistory history;
//   history.update(message);           // fresh records; repeats are ignored
//   std::string body = history.json(); // {"hello": ..., "iterations": [...], "timeline": [...], ...}
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "actors/monitor/monitor_schema.hpp"

namespace troupe::actors {

class MonitorHistory {
 public:
  static constexpr size_t kIterations = 600;  // iteration records (log lines) kept
  static constexpr size_t kStages = 120;      // per-stage breakdowns kept
  static constexpr size_t kTimeline = 4;      // traced iterations whose ops the timeline shows

  void update(const MonitorMessage& message);
  // {"hello": {...} | null, "iterations": [{wire fields}...], "validations": [...],
  //  "stages": [{wire fields}...], "timeline": [{"iteration": N, "start_ns": t0, "end_ns": t1,
  //  "ops": [[stage, kind, microbatch, chunk, start_ns, end_ns], ...]}, ...], "end": {...} | null,
  //  "trace_events": N, "dropped_trace_events": N}; kind as in the trace file (0 forward, 1 backward, 2 send, 3 recv).
  std::string json() const;

 private:
  struct TimelineIteration {
    int64_t iteration = 0, start_ns = 0, end_ns = 0;
    std::vector<schedules::TraceEvent> ops;  // events of pipeline stages
  };
  mutable std::mutex mutex_;
  std::optional<MonitorHello> hello_;
  std::optional<MonitorEnd> end_;
  std::deque<MonitorIteration> iterations_;
  std::deque<MonitorValidation> validations_;
  std::deque<MonitorStages> stages_;
  std::deque<TimelineIteration> timeline_;
  int64_t trace_events_ = 0, dropped_ = 0;
};

}  // namespace troupe::actors
