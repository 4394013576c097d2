// What `troupe monitor` knows about a run, built from the messages it receives, and the ways it
// shows it: the terminal view (progress toward --train-iters with ETA, the latest values in the
// log line's own formats, a small loss chart), one line per record when the output is not a
// terminal, and the JSON snapshot of --once. For a `troupe serve` process (hello kind "serve")
// the view shows its serving state instead: requests/s, tokens/s, queue, batch, KV blocks,
// TTFT and TPOT percentiles.
//
//   MonitorView view;
//   view.apply(message);                          // repeats and reordering are harmless
//   std::fputs(render_terminal(view, endpoint, 100).c_str(), stdout);
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "actors/monitor/monitor_schema.hpp"
#include "apps/common/duration_format.hpp"  // format_duration: the view's ETA

namespace troupe::apps {

struct MonitorView {
  std::optional<actors::MonitorHello> hello;
  std::optional<actors::MonitorIteration> iteration;  // the latest (highest) iteration seen
  std::optional<actors::MonitorValidation> validation;
  std::optional<actors::MonitorEnd> end;
  std::optional<actors::MonitorStages> stages;    // the latest traced iteration's per-stage time
  std::optional<actors::MonitorServing> serving;  // troupe serve: the latest state
  uint64_t serving_seq = 0;                       // ... its message number
  uint64_t trace_events = 0;                      // trace events received (fresh messages)
  int64_t dropped_events = 0;                     // ... and the run's count of those it dropped
  std::map<int64_t, double> losses;               // iteration -> lm loss of the records seen, the latest kHistory
  uint64_t last_seq = 0;                          // highest fresh message number seen
  uint64_t missed = 0;                            // fresh messages that never arrived (gaps in seq): dropped for us
  uint64_t messages = 0;

  static constexpr size_t kHistory = 240;

  // Takes in one message; returns whether the view changed. A hello with another run_id (a new
  // run on the same endpoint) starts the view afresh.
  bool apply(const actors::MonitorMessage& m);
  bool complete() const { return hello && (iteration || serving || end); }
  bool serve() const { return hello && hello->kind == "serve"; }
  // Fraction of --train-iters done, and the seconds left at the latest pace (NaN: unknown).
  double progress() const;
  double eta_seconds() const;
};

// The latest values, with the log line's formats and labels.
std::string format_values(const actors::MonitorIteration& it);
// Per-stage utilisation of one iteration: a bar and the share of each state, a line per stage.
std::string format_stages(const actors::MonitorStages& s, int width);
// A serving record: rates, queue, batch, KV blocks, counts, TTFT/TPOT p50/p99 in ms.
std::string format_serving(const actors::MonitorServing& s);
// An ASCII chart of the losses (the newest `width` points), `height` rows, with its y range.
std::string loss_chart(const std::map<int64_t, double>& losses, int width, int height);
// The whole terminal view; every line at most `width` columns.
std::string render_terminal(const MonitorView& view, const std::string& endpoint, int width,
                            double seconds_since_message);
// One line for a fresh record (non-terminal output); empty for a hello.
std::string render_line(const MonitorView& view, const actors::MonitorMessage& m);
// --once: {"endpoint", "schema_version", "hello", "iteration", "validation", "end", "stages",
// "serving", "progress", "eta_seconds", "missed_messages", "trace_events", "dropped_trace_events"};
// absent records are null, NaN numbers null.
std::string snapshot_json(const MonitorView& view, const std::string& endpoint);

}  // namespace troupe::apps
