// `troupe monitor --record FILE`: what a run publishes (actors/monitor/monitor_schema.hpp), saved. The
// `trace` messages become a trace file that `troupe replay FILE` reads (schedules/trace.hpp;
// the header from the first trace message); every other record (hello, iteration, validation,
// stages, end) a line of FILE.records.jsonl: {"type", "seq", "unix_ms", "record": {wire
// fields}}. Each message is written once, however often it is repeated (a subscriber that
// attaches gets the latest iterations again); messages of another run on the same endpoint
// are left out.
//
//   TraceRecorder rec("run.trace");
//   while (auto m = sub.receive(100ms)) rec.apply(*m);
//   rec.close();   // then: troupe replay run.trace
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "actors/monitor/monitor_schema.hpp"
#include "base/output_file.hpp"
#include "schedules/trace.hpp"

namespace troupe::apps {

class TraceRecorder {
 public:
  explicit TraceRecorder(std::string path) : path_(std::move(path)) {}
  // Writes a message not seen before: a trace's events to FILE, another record to its line.
  void apply(const actors::MonitorMessage& m);
  // Flushes and closes the file; false when no trace message came, so no file was written (a
  // file replay would reject is worse than none).
  bool close();

  const std::string& path() const { return path_; }
  std::string records_path() const { return path_ + ".records.jsonl"; }
  int64_t events() const { return events_; }
  size_t iterations() const { return iterations_.size(); }

 private:
  std::string path_;
  void write_trace(const actors::MonitorTrace& t);
  std::unique_ptr<schedules::TraceWriter> writer_;
  std::unique_ptr<OutputFile> records_;
  std::string run_id_;          // the run being recorded (its hello); empty before one arrives
  bool other_run_ = false;      // the latest hello was another run's
  std::set<uint64_t> written_;  // seq of the trace messages written
  std::set<int64_t> iterations_;
  int64_t events_ = 0;
};

}  // namespace troupe::apps
