#include "apps/monitor/trace_recorder.hpp"

#include <type_traits>

#include "actors/monitor/monitor_json.hpp"

namespace troupe::apps {

void TraceRecorder::apply(const actors::MonitorMessage& m) {
  if (const auto* h = std::get_if<actors::MonitorHello>(&m.body)) {
    if (run_id_.empty()) run_id_ = h->run_id;
    other_run_ = h->run_id != run_id_;  // a new run on the endpoint: its seq numbers start again
  }
  if (other_run_ || !written_.insert(m.seq).second) return;
  if (const auto* t = std::get_if<actors::MonitorTrace>(&m.body)) {
    write_trace(*t);
    return;
  }
  nlohmann::ordered_json line = {{"type", actors::monitor_type_name(m.body)}, {"seq", m.seq}, {"unix_ms", m.unix_ms}};
  std::visit(
      [&](const auto& body) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(body)>, actors::MonitorTrace>)
          line["record"] = actors::monitor_json(body);
      },
      m.body);
  if (!records_) records_ = std::make_unique<OutputFile>(records_path(), "the monitor's records " + records_path());
  records_->write(line.dump() + "\n");
  records_->flush();
}

void TraceRecorder::write_trace(const actors::MonitorTrace& t) {
  if (!writer_) {
    schedules::TraceHeader header;
    header.schedule = schedules::schedule_from_name(t.schedule);
    header.shape = {int(t.stages), int(t.chunks), int(t.microbatches), int(t.group_size)};
    header.num_layers = int(t.num_layers);
    for (int64_t n : t.chunk_layers) header.chunk_layers.push_back(int(n));
    header.iteration = t.iteration;
    writer_ = std::make_unique<schedules::TraceWriter>(path_, header);
  }
  for (const schedules::TraceEvent& e : t.events) writer_->append(e);
  writer_->flush();  // readable after every message, as --trace's file
  events_ += int64_t(t.events.size());
  iterations_.insert(t.iteration);
}

bool TraceRecorder::close() {
  if (records_) records_->close();
  if (!writer_) return false;
  writer_->close();
  return true;
}

}  // namespace troupe::apps
